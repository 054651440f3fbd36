"""Draw the paper's figures from saved results only: grpo_mse.commands.make_figures (its flags and what it does: python
plots/make_figures.py --help).
"""

from grpo_mse import cli
from grpo_mse.commands.make_figures import main

if __name__ == "__main__":
    cli.run(main)
