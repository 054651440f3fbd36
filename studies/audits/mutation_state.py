"""mutmut's verdicts carried between machines (scripts/mutation.sh; docs/tests.md).

mutmut keeps each mutant's verdict in ``mutants/<file>.meta`` beside the hash of the function it mutates, and reruns
only mutants without a verdict or whose function changed. ``mutants/`` is a git-ignored scratch copy, so a run that
spans sessions (the whole maths rooms take hours on two cores) would start again on every fresh checkout. ``save``
keeps the verdicts and function hashes in one committed JSON file; ``restore`` writes them back as meta files into a
fresh ``mutants/`` before mutmut generates its mutants, and mutmut then keeps a verdict only where the function's hash
is unchanged (its own rule), so an edited function is tested again.

  python scripts/mutation_state.py --action save|restore   (scripts/mutation.sh calls it before and after mutmut)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

VERDICTS = Path("results/mutation/verdicts.json")
META = ".meta"


def verdict_count(state: dict) -> int:
    return sum(len(entry["exit_code_by_key"]) for entry in state.values())


def function_of(mutant: str) -> str:
    """The mutated function's key in mutmut's hashes: ``pkg.mod.x_f__mutmut_3`` -> ``x_f`` (methods ``xǁCǁm``)."""
    return mutant.rpartition(".")[2].rpartition("__mutmut_")[0]


def save(mutants: Path, verdicts: Path) -> int:
    """Write every decided verdict under ``mutants`` (with its file's function hashes) to ``verdicts``. Saved
    verdicts this ``mutants`` lacks are kept while their function is unchanged (the same hash), so runs over
    different modules, or the same module's survivors rerun, add up. Returns the number of verdicts saved."""
    state = json.loads(verdicts.read_text()) if verdicts.exists() else {}
    for meta in sorted(mutants.rglob("*.py" + META)):
        data = json.loads(meta.read_text())
        source, hashes = meta.relative_to(mutants).as_posix()[: -len(META)], data["hash_by_function_name"]
        saved = state.get(source, {"hash_by_function_name": {}, "exit_code_by_key": {}})
        kept = {
            key: code
            for key, code in saved["exit_code_by_key"].items()
            if saved["hash_by_function_name"].get(function_of(key)) == hashes.get(function_of(key))
        }
        decided = kept | {key: code for key, code in data["exit_code_by_key"].items() if code is not None}
        if decided:
            state[source] = {"hash_by_function_name": hashes, "exit_code_by_key": decided}
    verdicts.parent.mkdir(parents=True, exist_ok=True)
    partial = verdicts.with_name(verdicts.name + ".partial")
    partial.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    os.replace(partial, verdicts)  # whole or not at all
    return verdict_count(state)


def restore(mutants: Path, verdicts: Path) -> int:
    """Write the saved verdicts as mutmut meta files into ``mutants`` when it does not exist yet (a fresh checkout);
    an existing ``mutants`` holds newer verdicts and is left alone. Returns the number of verdicts restored."""
    if mutants.exists() or not verdicts.exists():
        return 0
    state = json.loads(verdicts.read_text())
    for source, entry in state.items():
        meta = mutants / (source + META)
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(
            json.dumps(
                {
                    "exit_code_by_key": entry["exit_code_by_key"],
                    "hash_by_function_name": entry["hash_by_function_name"],
                    "type_check_error_by_key": {},
                    "durations_by_key": {},
                    "estimated_durations_by_key": {},
                }
            )
        )
    return verdict_count(state)
