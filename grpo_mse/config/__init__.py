"""Run configs: the typed settings of the gradient-evaluation commands and the Algorithm-1 simulation, as flags
(grpo_mse.flags), with their bounds.

The gradient-evaluation configs also check the command's environment when they are built (torchrun variables,
the device, the vLLM backend, the model folder, the output folders); the simulation's run checks its model folder
when it starts. So the maths rooms below take plain values and import neither ``cli`` nor ``flags``. Importing a
config is cheap (no torch)."""
