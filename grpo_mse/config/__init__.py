"""Run configs: the typed settings of every gradient-evaluation and simulation command, as flags (grpo_mse.flags).

A config checks its values and the command's environment (torchrun variables, writable folders, the model
folder, the sampling backend) when it is built, so the maths rooms below take plain values and import neither
``cli`` nor ``flags``. Importing a config is cheap (no torch)."""
