"""Print the HF folder a model path names, converting a GGUF file once (``policy/gguf_convert.py``).

VERL loads an HF folder (``actor_rollout_ref.model.path``), so the launcher turns ``MODEL=file.gguf`` into its
converted folder before composing the command:

  python -m grpo_mse.training.model_folder path/to/model.gguf     # prints the cached folder
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.policy.model_source import check_model_path


@dataclass(kw_only=True)
class ModelFolderConfig(Flags):
    """One positional model: a GGUF file, a folder holding one, an HF folder or a hub id."""

    model: str = option(positional=True, help="GGUF file, folder holding one GGUF file, HF folder or hub id")


def main(argv: list[str] | None = None) -> int:
    args = ModelFolderConfig.from_argv(argv, description=__doc__)
    check_model_path(args.model)
    from grpo_mse.policy.loading import model_folder  # torch: after the flags are checked

    print(model_folder(args.model))
    return 0


if __name__ == "__main__":
    cli.run(main)
