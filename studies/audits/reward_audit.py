"""Audit the reward rules on a model's free-form answers against labels (docs/real_llm.md, "Reward audit").

  python scripts/reward_audit.py sample --model M --dataset D --limit 48 --n 16 --out samples.jsonl
  python scripts/reward_audit.py select --samples samples.jsonl --others 60 --out to_label.jsonl
  python scripts/reward_audit.py count --samples samples.jsonl --labels labels.jsonl --out summary.json
  python scripts/reward_audit.py gold gsm8k --split test --out gold.json   # the rules on GSM8K/MATH golds

``gold`` checks the GSM8K and MATH rules on every gold of the installed data (studies.audits.gold_audit).

``sample`` draws exactly the oracle's samples j < n of each row (random stream (seed, row key, j), as
calculate_oracle_v.py with the same settings draws them) and scores each text under both rules. ``select`` picks
what a person labels, blind to the rules' verdicts and shuffled: every text either rule rewards, every other text
that contains the gold number, and a seeded random sample of the rest (where both rules say 0 and the gold does
not occur: a false negative there is rare, and the sample bounds it). ``count`` joins the labels (``{"id", "j",
"label": 0 or 1}``: 1 when the response gives the gold as its answer to the problem) and counts each rule's false
positives and false negatives per stratum, with the rest's false negatives estimated from its sample.
"""

import json
import random
import re
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option, parse_command
from grpo_mse.policy.model_source import check_model_path
from grpo_mse.rewards.rules import final_answer_reward, last_integer_reward, parse_gold
from grpo_mse.tables.outputs import wilson_interval, write_atomic, write_json
from studies.audits.gold_audit import GoldConfig

RULES = {"last_integer": last_integer_reward, "final_answer": final_answer_reward}


@dataclass(kw_only=True)
class SampleConfig(Flags):
    """draw the oracle's first n samples of each row and score them under both rules"""

    model: str = option(help="hub id, local folder or GGUF file")
    dataset: str = option(help="a table with prompt and ground_truth (calculate_oracle_v.py's --dataset)")
    limit: int = option(48, minimum=1, help="the first N rows")
    n: int = option(16, minimum=1, help="samples per row (the oracle's samples j < n)")
    seed: int = option(0, minimum=0, help="the oracle's --seed")
    temperature: float = option(1.0, above=0, help="sampling temperature")
    top_p: float = option(0.95, above=0, maximum=1, help="nucleus mass")
    max_new_tokens: int = option(32, minimum=1, help="tokens per continuation at most")
    batch_size: int = option(64, minimum=1, help="sequences per generation batch")
    out: str = option(help="output JSONL, one line per sample (replaced)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_model_path(self.model)
        cli.writable_file(self.out, "--out")


@dataclass(kw_only=True)
class SelectConfig(Flags):
    """pick the samples to label, blind to the rules' verdicts"""

    samples: str = option(help="JSONL of the sample command")
    others: int = option(60, minimum=0, help="random samples of the rest (both rules 0, no gold in the text)")
    seed: int = option(0, minimum=0, help="seed of the random sample and of the shuffle")
    out: str = option(help="output JSONL to label (replaced): id, j, problem, gold, text")

    def __post_init__(self) -> None:
        super().__post_init__()
        cli.writable_file(self.out, "--out")


@dataclass(kw_only=True)
class CountConfig(Flags):
    """count each rule's false positives and negatives against the labels"""

    samples: str = option(help="JSONL of the sample command")
    labels: str = option(help="JSONL of labels: id, j, label (1: the response gives the gold as its answer)")
    out: str = option(help="output JSON summary (replaced)")

    def __post_init__(self) -> None:
        super().__post_init__()
        cli.writable_file(self.out, "--out")


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def draw(config: SampleConfig) -> list[dict]:
    """One record per sample: row id, sample index j, problem, gold, text, whether EOS ended it, both rewards."""
    from grpo_mse.policy.loading import load_policy
    from grpo_mse.policy.sampling import HFSampler, SamplingSettings, decode
    from grpo_mse.tables.inputs import load_rows, prompt_ids, row_keys

    table = load_rows(config.dataset)
    keys = row_keys(table)  # the oracle's keys: decided on the whole table
    rows = table[: config.limit]
    model, tokenizer = load_policy(config.model)
    settings = SamplingSettings.of_run(config, model, tokenizer)
    sampler = HFSampler(model, settings, config.batch_size)
    requests = [(prompt_ids(tokenizer, row["prompt"]), config.n, (config.seed, keys[i])) for i, row in enumerate(rows)]
    records = []
    for i, continuations in enumerate(sampler.sample(requests)):
        row = rows[i]
        prompt = row["prompt"] if isinstance(row["prompt"], str) else row["prompt"][-1]["content"]
        for j, (tokens, text) in enumerate(zip(continuations, decode(tokenizer, continuations))):
            record = {"id": keys[i], "j": j, "problem": prompt.strip().splitlines()[-1], "gold": row["ground_truth"]}
            record.update(text=text, ended=bool(tokens) and tokens[-1] in settings.eos_ids)
            records.append({**record, **{name: int(rule(text, row["ground_truth"])) for name, rule in RULES.items()}})
    return records


def mentions_gold(record: dict) -> bool:
    """True when the gold integer occurs in the text as a number of its own (not inside a longer one)."""
    gold = parse_gold(record["gold"])
    return gold is not None and re.search(rf"(?<![\d.]){re.escape(str(gold))}(?![\d])", record["text"]) is not None


def stratum(record: dict) -> str:
    if any(record[name] for name in RULES):
        return "rewarded"
    return "mentions_gold" if mentions_gold(record) else "rest"


def select(samples: list[dict], others: int, seed: int) -> list[dict]:
    chosen = [r for r in samples if stratum(r) != "rest"]
    rest = [r for r in samples if stratum(r) == "rest"]
    generator = random.Random(seed)
    chosen += generator.sample(rest, min(others, len(rest)))
    generator.shuffle(chosen)  # the labeller sees no order that reveals a stratum
    return [{key: r[key] for key in ("id", "j", "problem", "gold", "text")} for r in chosen]


def count(samples: list[dict], labels: list[dict]) -> dict:
    """Per rule and stratum: labelled, TP, FP, FN, TN; the rest's false negatives scaled from its sample."""
    label_of = {(r["id"], r["j"]): int(r["label"]) for r in labels}
    by_stratum = {name: [r for r in samples if stratum(r) == name] for name in ("rewarded", "mentions_gold", "rest")}
    for name in ("rewarded", "mentions_gold"):
        missing = [(r["id"], r["j"]) for r in by_stratum[name] if (r["id"], r["j"]) not in label_of]
        require(not missing, f"{len(missing)} {name} samples have no label (first: id {missing[:1]})")
    summary = {"samples": len(samples), "strata": {k: len(v) for k, v in by_stratum.items()}, "rules": {}}
    rest_labelled = [label_of[(r["id"], r["j"])] for r in by_stratum["rest"] if (r["id"], r["j"]) in label_of]
    positives = sum(rest_labelled)
    low, high = wilson_interval(positives, len(rest_labelled))
    summary["rest_sample"] = {"labelled": len(rest_labelled), "positive": positives, "share_ci95": [low, high]}
    for rule in RULES:
        cells = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
        for name in ("rewarded", "mentions_gold"):
            for r in by_stratum[name]:
                truth, said = label_of[(r["id"], r["j"])], r[rule]
                cells[("t" if truth == said else "f") + ("p" if said else "n")] += 1
        rest = len(by_stratum["rest"])
        summary["rules"][rule] = {
            **cells,
            "fn_rest_estimate": [round(low * rest, 1), round(high * rest, 1)],  # both rules say 0 on the rest
            "rewarded": sum(r[rule] for r in samples),
            "labelled_positive": sum(label_of.get((r["id"], r["j"]), 0) for r in samples),
        }
    return summary


COMMANDS = {"sample": SampleConfig, "select": SelectConfig, "count": CountConfig, "gold": GoldConfig}


def main(argv=None) -> None:
    command, args = parse_command(COMMANDS, argv, description=__doc__)
    if command == "gold":
        from studies.audits import gold_audit

        gold_audit.main(args)
    elif command == "sample":
        records = draw(args)
        write_atomic(args.out, "".join(json.dumps(r) + "\n" for r in records))
        rewarded = {name: sum(r[name] for r in records) for name in RULES}
        print(f"{len(records)} samples -> {args.out}; rewarded: {rewarded}")
    elif command == "select":
        chosen = select(read_jsonl(args.samples), args.others, args.seed)
        write_atomic(args.out, "".join(json.dumps(r) + "\n" for r in chosen))
        print(f"{len(chosen)} samples to label -> {args.out}")
    else:
        summary = count(read_jsonl(args.samples), read_jsonl(args.labels))
        write_json(args.out, summary)
        for rule, cells in summary["rules"].items():
            rest = cells["fn_rest_estimate"]
            print(f"{rule}: FP {cells['fp']}, FN {cells['fn']} (+ {rest} in the rest), TP {cells['tp']}")
