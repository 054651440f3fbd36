"""The built-in default: the arithmetic data generator and the tiny policy builder."""
