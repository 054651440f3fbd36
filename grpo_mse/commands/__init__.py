"""The command lines' bodies (flags -> config -> run -> printout), one module per entry point; the files under
Gradient_evaluation/ and plots/ only run them under cli.run. The top floor: nothing in the package imports it."""
