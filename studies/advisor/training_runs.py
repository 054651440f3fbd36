"""What k-validation (scripts/k_validation.py) reads from the collected training runs and the data it trains on:
per-run means over the validation steps (``run_means``), the pilot's gain (``pilot_gain``), the K adaptive runs
chose (``adaptive_k``), all through grpo_mse.training.runs_table's one rule (``select_runs``); and a prepared
arithmetic dataset restricted to some problem kinds (``subset``)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from grpo_mse.errors import InputError, require
from grpo_mse.training.runs_table import Selection, select_runs


def note_left_out(selection: Selection) -> None:
    """The runs ``selection`` left out, one note on stderr."""
    if selection.excluded:
        print(f"note: left out {len(selection.excluded)} run(s): {'; '.join(selection.excluded)}", file=sys.stderr)


def run_means(frame, metric: str):
    """Per run that counts (K, seed): the mean of ``metric`` over the validation steps after step 0 (columns K,
    seed, value). The runs are ``select_runs``'s asked for every such step the table holds, so a run that stopped
    early or is recorded interrupted, failed or truncated is left out (a note on stderr): every run averages the
    same steps. Empty when the table has no value after step 0."""
    import pandas as pd

    later = frame[(frame["metric"] == metric) & (frame["step"] > 0)]
    if later.empty:
        return pd.DataFrame({"K": [], "seed": [], "value": []})
    selection = select_runs(later, metric, steps=sorted(set(later["step"])))
    note_left_out(selection)
    return selection.frame.groupby(["K", "seed"])["value"].mean().reset_index()


def pilot_gain(frame, metric: str) -> float:
    """Mean over the pilot runs of (accuracy at the common step S - accuracy at the first step every run logged),
    the runs ``select_runs``'s at its default steps (Table 2's S: the last step every included run reached), so a
    run that stopped early is compared at S, not at its own last step."""
    import numpy as np

    selection = select_runs(frame, metric)
    note_left_out(selection)
    sub = selection.frame
    runs = sub.groupby(["K", "seed"])
    first = min(set.intersection(*(set(run["step"]) for _, run in runs)))
    at = sub.set_index(["K", "seed", "step"])["value"]
    return float(np.mean([at[(k, seed, selection.step)] - at[(k, seed, first)] for (k, seed), _ in runs]))


ADAPTIVE_FIELDS = ("K", "K_star_exact", "c1", "c2", "c3", "identified", "seconds")


@dataclass
class AdaptiveK:
    """What adaptive-K runs chose, from their ``adaptive_k/*`` and ``trl/group_size`` rows."""

    choices: list  # per (seed, re-estimate step): {"seed", "step", *ADAPTIVE_FIELDS} (None where not logged)
    share_of_steps: dict  # {"K": share of the training steps run at K}
    per_step: dict  # {"seed": [K of steps 1, 2, ...]}


def adaptive_k(frame) -> AdaptiveK:
    """The K chosen at each re-estimate with the advisor's numbers (K* is missing where it was infinite or
    undefined), and the K in force at each step (``trl/group_size``)."""
    sub = frame[frame["metric"].str.startswith("adaptive_k/")]
    choices = []
    for (seed, step), group in sub.groupby(["seed", "step"]):
        values = dict(zip(group["metric"].str.removeprefix("adaptive_k/"), group["value"]))
        choices.append({"seed": int(seed), "step": int(step), **{f: values.get(f) for f in ADAPTIVE_FIELDS}})
    steps = frame[frame["metric"] == "trl/group_size"]
    share = {str(int(k)): float(n / len(steps)) for k, n in steps["value"].value_counts().sort_index().items()}
    per_step = {str(int(seed)): [int(v) for v in g.sort_values("step")["value"]] for seed, g in steps.groupby("seed")}
    return AdaptiveK(choices, share, per_step)


# k-validation's settings train on some problem kinds only
KINDS = ("mixed", "division", "nodivision")


def is_division(prompt_text: str) -> bool:
    """True for an exact-division problem: the last line of the prompt holds ' / '."""
    return " / " in prompt_text.strip().split("\n")[-1]


def keep_row(prompt_text: str, kinds: str) -> bool:
    if kinds not in KINDS:
        raise InputError(f"--kinds {kinds!r}: choose from {', '.join(KINDS)}")
    return kinds == "mixed" or is_division(prompt_text) == (kinds == "division")


def subset(data_dir: str, out_dir: str, kinds: str, n_test: int) -> dict:
    """train.parquet and test.parquet of ``data_dir`` (Policy_Optimization/prepare_data.py) restricted to ``kinds``
    (k-validation's settings: exact divisions, the other problems, or both); the first ``n_test`` test rows."""
    import pandas as pd

    counts = {}
    os.makedirs(out_dir, exist_ok=True)
    for split in ("train", "test"):
        path = os.path.join(data_dir, f"{split}.parquet")
        require(os.path.isfile(path), f"{path} not found (run Policy_Optimization/prepare_data.py)")
        frame = pd.read_parquet(path)
        mask = [keep_row(p[-1]["content"], kinds) for p in frame["prompt"]]
        kept = frame[mask]
        if split == "test":
            require(len(kept) >= n_test, f"only {len(kept)} {kinds} test rows, fewer than --n_test {n_test}")
            kept = kept.head(n_test)
        require(len(kept) > 0, f"no {kinds} rows in {path}")
        kept.reset_index(drop=True).to_parquet(os.path.join(out_dir, f"{split}.parquet"))
        counts[split] = len(kept)
    return counts
