"""The built-in defaults: the arithmetic data generator and the builders of the tiny, training-demo and paper-regime
policies."""
