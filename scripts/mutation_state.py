"""Save mutmut's verdicts from mutants/ into the committed results/mutation/verdicts.json, or restore them into a
fresh checkout's mutants/ (studies/audits/mutation_state.py; scripts/mutation.sh runs both).

  python scripts/mutation_state.py --action restore    # before `mutmut run`: only when mutants/ does not exist
  python scripts/mutation_state.py --action save       # after it: every decided verdict, other files' kept
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from studies.audits.mutation_state import VERDICTS, restore, save


@dataclass(kw_only=True)
class MutationStateConfig(Flags):
    """What to do, and where mutmut's copy and the committed verdicts are."""

    action: str = option(choices=("save", "restore"), help="save the verdicts, or restore them into a fresh mutants/")
    mutants: str = option("mutants", help="mutmut's working copy")
    verdicts: str = option(str(VERDICTS), help="the committed verdicts (JSON)")


def main(argv=None) -> None:
    args = MutationStateConfig.from_argv(argv, description=__doc__)
    count = (save if args.action == "save" else restore)(Path(args.mutants), Path(args.verdicts))
    print(f"mutation state: {args.action}d {count} verdicts ({args.verdicts})")


if __name__ == "__main__":
    cli.run(main)
