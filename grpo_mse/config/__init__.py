"""Run configs: the typed settings of the gradient-evaluation commands (``gradient_evaluation``: ModelConfig,
OracleConfig, TracecovConfig and the sampler registry), as flags (grpo_mse.flags), with their bounds. The
Algorithm-1 simulation's settings live with the simulation, in studies.simulation.config.

The gradient-evaluation configs also check the command's environment when they are built (torchrun variables,
the device, the vLLM backend, the model folder, the output folders). So the maths rooms below take plain values
and import neither ``cli`` nor ``flags``. Importing a config is cheap (no torch)."""
