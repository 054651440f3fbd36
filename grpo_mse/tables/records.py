"""The records the runs save and read back, one definition each, to and from JSON here (keys in the saved order).

- ``PromptRecord``: one prompt's result at one group size K (run_tracecov's progress logs, ``prompt_results`` of
  the per-K files): tr Cov per estimator, and for biased estimators bias^2 and MSE = tr Cov + bias^2;
- ``OracleValues``: what the oracle adds to a dataset row (V_oracle, its count of samples and 95% interval);
- ``C1BatchRecord``: one c1 batch of prompts at one K (run_tracecov's progress logs): the Gram matrix of their
  mean gradients, within-prompt variances and c1 = between - within.

And run_tracecov's files made of its records: the per-K file (``detailed``), the main file's traces
(``summary``), the long per-prompt table (``tidy_rows``).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import MISSING, dataclass, fields, replace

from grpo_mse.errors import DataError
from grpo_mse.tables.outputs import mean_ci

V_ORACLE = "V_oracle"  # the table column of V(x), read from dataset rows (not a record of ours)
N_ORACLE = "n_oracle"  # the table column of the samples behind V_oracle (null: an exact V)


def oracle_value(row: dict) -> float:
    """V(x) of an oracle-table row."""
    return float(row[V_ORACLE])


def oracle_count(row: dict):
    """The samples behind the row's V_oracle as stored (None: exact V, or a table without the column)."""
    return row.get(N_ORACLE)


def required(cls) -> list[str]:
    """The fields of record class ``cls`` that every saved object has (those without a default)."""
    return [f.name for f in fields(cls) if f.default is MISSING]


class SavedRecord:
    """Base of a dataclass saved as one JSON object: the fields in declaration order, an optional field (one with
    a default) only when set (not None); read back with a DataError naming missing required or unknown keys."""

    @classmethod
    def from_json(cls, data: dict, where: str | None = None):
        """The record of a saved JSON object; DataError (prefixed by ``where``, e.g. file and line) naming the
        missing required keys or the unknown ones."""
        prefix = f"{where}: " if where else ""
        if not isinstance(data, dict):
            raise DataError(f"{prefix}a {cls.__name__} must be a JSON object, not {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        missing = [name for name in required(cls) if name not in data]
        unknown = [key for key in data if key not in names]
        problems = [f"lacks {', '.join(missing)}"] if missing else []
        problems += [f"has unknown {', '.join(unknown)}"] if unknown else []
        if problems:
            raise DataError(f"{prefix}{cls.__name__} {' and '.join(problems)}")
        return cls(**data)

    def to_json(self) -> dict:
        """The saved JSON object; a field holding a record, or a {key: record} mapping, saved as its JSON."""
        return {
            f.name: saved(getattr(self, f.name))
            for f in fields(self)
            if f.default is MISSING or getattr(self, f.name) is not None
        }


def saved(value):
    """``value`` as saved: a record as its JSON object, a mapping or list holding records with each saved (anything
    else as it is)."""
    if isinstance(value, SavedRecord):
        return value.to_json()
    if isinstance(value, dict) and any(isinstance(v, (SavedRecord, dict, list)) for v in value.values()):
        return {key: saved(v) for key, v in value.items()}
    if isinstance(value, list) and any(isinstance(v, (SavedRecord, dict, list)) for v in value):
        return [saved(v) for v in value]
    return value


LENGTH_COLUMNS = ["mean_new_tokens", "share_eos", "share_cut"]  # the prompt's response lengths (empty: not recorded)
TIDY_COLUMNS = ["prompt_index", "id", "K", "estimator", "trace", "bias2", "mse", "V_oracle", "mean_reward"]
TIDY_COLUMNS += LENGTH_COLUMNS
TIDY_COLUMNS += ["prompt_hash"]  # last, set by name: scripts/compare_tracecov_runs.py pairs only the same prompts


def prompt_hash(prompt) -> str:
    """The first 16 hex digits of the sha256 of the prompt's JSON text (keys sorted): equal for the same text or
    chat messages, whatever the table's format or row order (64 bits: a chance collision is beyond reach)."""
    text = json.dumps(prompt, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class PromptRecord(SavedRecord):
    """One prompt (``prompt_index``, its row ``id``) at group size K: tr Cov of each estimator over M groups
    (``tr_cov``), bias^2 and mse = tr Cov + bias^2 for biased estimators, ||E s||^2, the oracle-noise bias, and
    std-GRPO against its own target (``bias2_own``, ``mse_own``). Optional fields are None when not measured."""

    K: int
    prompt_index: int
    id: object
    prompt: object
    gold: object
    V_oracle: float
    mean_reward: float
    tr_cov: dict[str, float]
    bias2: dict[str, float] | None = None
    mse: dict[str, float] | None = None
    mean_score_sq: float | None = None  # nan: not measured (V 0 or 1), saved as null
    oracle_noise: float | None = None
    bias2_own: dict[str, float] | None = None
    mse_own: dict[str, float] | None = None
    # the M K continuations' lengths (policy.sampling.ResponseLengths; None in records of runs before they were kept)
    mean_new_tokens: float | None = None
    share_eos: float | None = None
    share_cut: float | None = None
    sketch_mse: dict[str, list[float]] | None = None  # sketched engine: each estimator's MSE under each sketch block

    NULLABLE = ("mean_score_sq", "oracle_noise")  # saved null stands for nan

    @staticmethod
    def holds(data: dict) -> bool:
        """True when a saved JSON object (a progress-log line) is a prompt record."""
        return "tr_cov" in data

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> PromptRecord:
        """The record of a saved JSON object (a saved null of a NULLABLE field read as nan)."""
        record = super().from_json(data, where)
        for name in cls.NULLABLE:
            if name in data and data[name] is None:
                setattr(record, name, math.nan)
        return record

    def mse_of(self, name: str) -> float:
        """MSE of estimator ``name``: tr Cov plus bias^2 when the record has them (biased estimators), else tr Cov."""
        return (self.mse if self.mse is not None else self.tr_cov)[name]

    def tidy_rows(self, names) -> list[dict]:
        """Rows of the per-prompt CSV (``TIDY_COLUMNS``): one per estimator in ``names``, bias2 0 when it has none."""
        rows = []
        digest = prompt_hash(self.prompt)
        for n in names:
            bias2 = (self.bias2 or {}).get(n, 0.0)
            values = (self.prompt_index, self.id, self.K, n, self.tr_cov[n], bias2, self.mse_of(n))
            lengths = [getattr(self, name) for name in LENGTH_COLUMNS]
            rows.append(dict(zip(TIDY_COLUMNS, (*values, self.V_oracle, self.mean_reward, *lengths))))
            rows[-1]["prompt_hash"] = digest
        return rows


@dataclass
class OracleValues(SavedRecord):
    """V_oracle of one prompt with the samples behind it (n_oracle, correct_count; None for an exact V) and its
    95% interval; merged into the dataset row after its own keys."""

    V_oracle: float
    n_oracle: int | None
    correct_count: int | None
    V_ci95_low: float
    V_ci95_high: float
    V_method: str | None = None
    oracle_settings: dict | None = None

    def merged_into(self, row: dict) -> dict:
        """The table line: ``row`` with these values (a key the row already has keeps its place)."""
        return {**row, **self.to_json()}


@dataclass
class C1BatchRecord(SavedRecord):
    """One c1 batch (``c1_batch``, its position in the run's layout) of n prompts at group size K: the Gram
    matrix of the oracle's per-prompt mean gradients (``gram``, rows in ``prompt_indices`` order), tr_oracle / M
    per prompt (``within_each``), between = sum_i ||g_i - mean g||^2 / (n - 1), within = mean(within_each),
    c1 = between - within; ``estimator_grams`` {name: {"gram", "within_each"}} of other estimators' means."""

    c1_batch: int
    K: int
    n: int
    prompt_indices: list[int]
    gram: list[list[float]]
    within_each: list[float]
    between: float
    within: float
    c1: float
    estimator_grams: dict[str, dict] | None = None

    @classmethod
    def of_results(cls, c1_batch: int, K: int, oracle: dict, others: dict[str, dict]) -> C1BatchRecord:
        """The record of ``BetweenPromptBatch.result()`` dicts: the oracle's whole, and the gram and within_each
        of each estimator in ``others`` {name: result} as estimator_grams (none when ``others`` is empty)."""
        grams = {name: {"gram": r["gram"], "within_each": r["within_each"]} for name, r in others.items()}
        return cls(c1_batch, K, **oracle, estimator_grams=grams or None)

    @staticmethod
    def holds(data: dict) -> bool:
        """True when a saved JSON object (a progress-log line) is a c1 batch record."""
        return "c1_batch" in data

    def with_estimator(self, name: str) -> C1BatchRecord:
        """The same batch with estimator ``name``'s Gram matrix and within_each (``estimator_grams[name]``) in
        place of the oracle's."""
        grams = self.estimator_grams[name]
        return replace(self, gram=grams["gram"], within_each=grams["within_each"])

    def zeroed(self) -> C1BatchRecord:
        """The same batch with within_each set to the Gram diagonal (so diagonal less within_each is 0)."""
        return replace(self, within_each=[float(row[i]) for i, row in enumerate(self.gram)])


# run_tracecov's files

NOTE = (
    "tr_cov = trace of the unbiased (M-1) sample covariance over M groups of the gradient estimate, "
    "over all parameters, per prompt, averaged over prompts (= MSE for unbiased estimators); "
    "ci95 = 1.96 sd / sqrt(T) across prompts."
)


def detailed(records: list[PromptRecord], k: int, names) -> dict:
    """The per-K file: every prompt's record and the average trace per estimator."""
    ordered = sorted(records, key=lambda r: r.prompt_index)
    return {
        "K": k,
        "prompt_results": [r.to_json() for r in ordered],
        "avg_traces": {n: mean_ci([r.tr_cov[n] for r in ordered])["mean"] for n in names},
    }


def summary(records_by_k: dict[int, list[PromptRecord]], k_list: list[int], names, config: dict) -> dict:
    """The main file: per estimator, the mean over prompts per K, with sd and 95% half-widths."""
    stats = {n: [mean_ci([r.tr_cov[n] for r in records_by_k[k]]) for k in k_list] for n in names}
    return {
        "K_list": k_list,
        "conditional_on_x": {n: [s["mean"] for s in stats[n]] for n in names},
        "ci95": {n: [s["ci95"] for s in stats[n]] for n in names},
        "sd": {n: [s["sd"] for s in stats[n]] for n in names},
        "n_prompts": [len(records_by_k[k]) for k in k_list],
        "mean_V_oracle": mean_ci([r.V_oracle for r in records_by_k[k_list[0]]])["mean"],
        **biased_summary(records_by_k, k_list, names),
        **length_summary(records_by_k, k_list),
        **mix_summary(records_by_k, k_list, names),
        **sketch_summary(records_by_k, k_list, names),
        "config": config,
        "note": NOTE,
    }


def biased_summary(records_by_k: dict[int, list[PromptRecord]], k_list: list[int], names) -> dict:
    """For runs with biased estimators: mean squared bias and MSE = trace + bias^2, with 95% half-widths."""
    if not any(r.bias2 is not None for k in k_list for r in records_by_k[k]):
        return {}
    out = {"bias2": {}, "mse": {}, "mse_ci95": {}}
    for n in names:
        mse = [mean_ci([r.mse[n] for r in records_by_k[k]]) for k in k_list]
        out["mse"][n], out["mse_ci95"][n] = [s["mean"] for s in mse], [s["ci95"] for s in mse]
        if any(n in r.bias2 for k in k_list for r in records_by_k[k] if r.bias2 is not None):
            out["bias2"][n] = [mean_ci([r.bias2[n] for r in records_by_k[k]])["mean"] for k in k_list]
    return out


def length_summary(records_by_k: dict[int, list[PromptRecord]], k_list: list[int]) -> dict:
    """The responses' lengths per K, means over prompts (``LENGTH_COLUMNS``); none when a record lacks them."""
    if any(r.mean_new_tokens is None for k in k_list for r in records_by_k[k]):
        return {}
    means = {
        name: [mean_ci([getattr(r, name) for r in records_by_k[k]])["mean"] for k in k_list] for name in LENGTH_COLUMNS
    }
    return {"response_lengths": means}


def equal_norm_ratio(values: list[float]) -> float:
    """Vanilla's MSE over the oracle baseline's that the prompts' V mix alone predicts: sum V / sum V (1 - V).

    With score norms of one size c (Assumption 2's setting), a prompt's vanilla MSE is about V c / K (its rewards'
    second moment) and the oracle's V (1 - V) c / K; a prompt with V = 0 adds 0 to both, one with V = 1 only to
    vanilla (the estimators treat them so: all rewards equal V). nan when no prompt has 0 < V < 1 and V = 1 none."""
    numerator, denominator = sum(values), sum(v * (1.0 - v) for v in values)
    return numerator / denominator if denominator > 0 else math.inf if numerator > 0 else math.nan


def mix_summary(records_by_k: dict[int, list[PromptRecord]], k_list: list[int], names) -> dict:
    """What the prompts' V mix says about the means: ``equal_norm_ratio`` (vanilla over oracle, when both run) and,
    when some prompts have V = 0 or 1, the mean MSE over the others (``mse_0<V<1``, n ``n_prompts_0<V<1``) beside
    the all-prompt mean the paper reports (its T prompts include V = 0 and 1)."""
    first = records_by_k[k_list[0]]
    out = {}
    if "naive" in names and "oracleV" in names:
        out["equal_norm_ratio"] = {"naive/oracleV": equal_norm_ratio([r.V_oracle for r in first])}
    inner = {k: [r for r in records_by_k[k] if 0.0 < r.V_oracle < 1.0] for k in k_list}
    if len(inner[k_list[0]]) < len(first) and all(inner.values()):
        out["mse_0<V<1"] = {n: [mean_ci([r.mse_of(n) for r in inner[k]])["mean"] for k in k_list] for n in names}
        out["n_prompts_0<V<1"] = [len(inner[k]) for k in k_list]
    return out


def sketch_summary(records_by_k: dict[int, list[PromptRecord]], k_list: list[int], names) -> dict:
    """The sketched engine's own error (none for the exact engines): per K and estimator, the R blocks' means over
    prompts B_r are R uncorrelated unbiased estimates of the mean MSE the run reports (their mean), so its sketch
    error's sd is sd_r(B_r) / sqrt(R); beside it, that sd over the prompts' 95% half-width (the intervals leave the
    sketch out: one sketch serves every prompt), and the sd of each ratio of two estimators' means likewise."""
    if any(r.sketch_mse is None for k in k_list for r in records_by_k[k]):
        return {}
    blocks = len(records_by_k[k_list[0]][0].sketch_mse[names[0]])

    def block_means(k, name):
        return [sum(r.sketch_mse[name][b] for r in records_by_k[k]) / len(records_by_k[k]) for b in range(blocks)]

    means = {name: [block_means(k, name) for k in k_list] for name in names}
    sd = {name: [sd_of_mean(per_k) for per_k in means[name]] for name in names}
    half = {name: [mean_ci([r.mse_of(name) for r in records_by_k[k]])["ci95"] for k in k_list] for name in names}
    ratios = {}
    for index, a in enumerate(names):  # the paired section's pairs: each estimator over a later one
        for b in names[index + 1 :]:
            per_k = [[x / y if y else math.nan for x, y in zip(top, bottom)] for top, bottom in zip(means[a], means[b])]
            ratios[f"{a}/{b}"] = [sd_of_mean(blocks_ratio) for blocks_ratio in per_k]  # nan: a mean of 0
    share = {name: [s / h if h and h > 0 else math.nan for s, h in zip(sd[name], half[name])] for name in names}
    return {"sketch_error": {"blocks": blocks, "sd": sd, "share_of_ci95": share, "ratio_sd": ratios}}


def sd_of_mean(values: list[float]) -> float:
    """sd(values) / sqrt(n), the sample sd with n - 1 (nan in, nan out)."""
    n = len(values)
    center = sum(values) / n
    return math.sqrt(sum((v - center) ** 2 for v in values) / (n - 1) / n)


def tidy_rows(records: list[PromptRecord], names) -> list[dict]:
    """Long table (``TIDY_COLUMNS``): one row per (prompt, K, estimator); mse = trace (+ bias2 for biased ones)."""
    return [row for r in sorted(records, key=lambda r: (r.K, r.prompt_index)) for row in r.tidy_rows(names)]
