"""Tables in and out: input schemas and loaders (inputs), result files and progress logs (outputs)."""
