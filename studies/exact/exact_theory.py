"""Exact oracle table and exact MSE curves for ONE generated token, by enumerating the vocabulary.

For the first T prompts of a table, the continuation y is a single token drawn from softmax(logits / T_temp)
(renormalised on the top_p nucleus);
the reward is the last-integer rule on its decoded text. Enumerating all tokens gives, exactly:

  OUT_DIR/oracle_exact_{model}_{ts}.jsonl  calculate_oracle_v.py's format with the exact V_oracle (n_oracle null),
                                           accepted by run_tracecov.py --oracle_table
  OUT_DIR/theory_{model}_{ts}.json         K_list; per estimator the mean over prompts of the exact MSE,
                                           tr Cov (trace_cov) and bias^2 at each K; c1, c2, c3, K* of the prompt
                                           set; per-prompt moments and curves; the Gram matrix of the gradients

Compare with: run_tracecov.py --oracle_table <the jsonl> --max_new_tokens 1 and the same --temperature, --top_p and
--score_distribution (at top_p < 1 the sampled law is the renormalised nucleus; with the model's score the closed
forms and c2, c3 assume E s = 0 and do not apply, only the per-estimator curves do).
With the built-in tokenizer a token holds at most one digit, so only gold answers 0..9 are reachable in one
token; --reachable_only skips the other rows (their V is 0 and every gradient is exactly 0).
"""

import os
import sys
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.gradients import estimators as est
from grpo_mse.policy.model_source import check_model_path
from grpo_mse.rewards.rules import check_answers
from grpo_mse.tables.inputs import check_prompts, load_rows, oracle_settings, prompt_ids
from grpo_mse.tables.outputs import timestamp, to_json, write_atomic, write_json
from grpo_mse.tables.resume import claim

BUILTIN = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "assets", "tiny_policy"
)


@dataclass(kw_only=True)
class ExactTheoryConfig(Flags):
    """The policy, prompts and sampling law to enumerate, the group sizes and estimators, and the output folder."""

    model: str = option(BUILTIN, help="hub id or local folder (default: the built-in policy)")
    revision: str = option("main", help="hub revision (branch, tag or commit) of --model")
    device: str = option("cpu", help="cpu, cuda, cuda:N or mps")
    dtype: str = option("fp32", choices=("fp16", "bf16", "fp32"), help="model weights' dtype")
    trust_remote_code: bool = option(False, help="allow the model's own code (off by default)")
    dataset: str = option(help="local .jsonl/.parquet/folder with prompt and ground_truth")
    split: str = option("train", help="split of a dataset folder")
    T: int = option(16, minimum=1, help="number of prompts (the first T, after --reachable_only)")
    reachable_only: bool = option(False, help="skip rows whose ground truth no single token can produce")
    temperature: float = option(1.0, above=0, help="sampling temperature")
    top_p: float = option(1.0, above=0, maximum=1, help="nucleus of the sampled law (1: the whole vocabulary)")
    score_distribution: str = option(
        "model",
        choices=("model", "sampling"),
        help="score of log pi_T (untruncated) or of the sampled law q (run_tracecov.py's flag)",
    )
    K_list: list[int] = option([2, 3, 4, 6, 8, 12, 16, 24, 32], minimum=2, help="group sizes of the exact curves")
    estimators: list[str] = option(list(est.ALL), choices=est.ALL, help="estimators of the exact curves")
    max_jacobian_gb: float = option(
        4.0, above=0, help="refuse models whose logit Jacobian (vocab x parameters, fp32) is larger"
    )
    out_dir: str = option("results/theory", help="output folder")

    def __post_init__(self) -> None:
        super().__post_init__()  # choices and bounds
        cli.check_device(self.device)
        self.K_list, self.estimators = cli.unique(self.K_list, "--K_list"), cli.unique(self.estimators, "--estimators")
        cli.writable_dir(self.out_dir, "--out_dir")
        check_model_path(self.model)


def parse_args(argv=None) -> ExactTheoryConfig:
    """The enumeration's settings from the command line (flags are ExactTheoryConfig's fields)."""
    return ExactTheoryConfig.from_argv(argv, description=__doc__)


def select(rows: list[dict], texts: list[str], count: int, reachable_only: bool) -> list[dict]:
    """The first ``count`` rows (only those with a one-token correct answer when ``reachable_only``)."""
    from studies.exact import one_token as ot

    chosen = [row for row in rows if not reachable_only or ot.reachable(texts, row["ground_truth"])][:count]
    require(bool(chosen), "no row has a ground truth that a single token can produce")
    return chosen


def main(argv=None) -> None:
    args = parse_args(argv)
    from grpo_mse.policy.loading import load_policy
    from grpo_mse.policy.model_source import model_basename_tag
    from studies.exact import one_token as ot  # torch loads after the flags are checked
    from studies.exact.theory import gradient_gram

    rows = load_rows(args.dataset, args.split)
    check_prompts(rows, args.dataset)
    check_answers(rows, args.dataset)
    model, tokenizer = load_policy(args.model, args.device, args.dtype, args.revision, args.trust_remote_code)
    size = ot.jacobian_bytes(model) / 2**30
    require(
        size <= args.max_jacobian_gb,
        f"the logit Jacobian needs {size:.3g} GiB > --max_jacobian_gb "
        f"{args.max_jacobian_gb:g}; exact enumeration is for small models",
    )
    texts = ot.token_texts(tokenizer, model.config.vocab_size)
    rows = select(rows, texts, args.T, args.reachable_only)
    if len(rows) < args.T:
        print(f"note: only {len(rows)} rows qualify; using them all", file=sys.stderr)
    for row in rows:  # fail on unformattable prompts before any work or output
        prompt_ids(tokenizer, row["prompt"])
    prompts, gradients, oracle_lines = [], [], []
    for row in cli.progress(rows, desc="prompts"):
        enum = ot.enumerate_row(model, tokenizer, row, texts, args.temperature, args.top_p, args.score_distribution)
        prompts.append(ot.prompt_summary(row, enum, args.K_list, args.estimators))
        gradients.append(enum.g)
        settings = {**oracle_settings(args, None), "max_new_tokens": 1}
        oracle_lines.append(to_json(ot.oracle_record(row, prompts[-1].V, settings)) + "\n")
    from grpo_mse.policy.model_source import model_fingerprint

    config = {
        **vars(args),
        "model_fingerprint": model_fingerprint(args.model, args.revision),  # make_figures --theory checks it
        "n_rows_used": len(rows),
        "matching_run_flags": {
            "max_new_tokens": 1,
            "top_p": args.top_p,
            "temperature": args.temperature,
            "score_distribution": args.score_distribution,
        },
    }
    summary = ot.theory_summary(prompts, gradient_gram(gradients), args.K_list, args.estimators, config).to_json()
    os.makedirs(args.out_dir, exist_ok=True)
    theory_stem = claim(os.path.join(args.out_dir, f"theory_{model_basename_tag(args.model)}_{timestamp()}"), ".json")
    theory_path = theory_stem + ".json"  # claimed: a run started in the same second gets its own name
    oracle_path = os.path.join(
        args.out_dir, "oracle_exact_" + os.path.basename(theory_stem).removeprefix("theory_") + ".jsonl"
    )
    write_atomic(oracle_path, "".join(oracle_lines))
    write_json(theory_path, summary)
    c = summary["scaling_constants"]
    print(
        f"{len(rows)} prompts, mean V = {summary['mean_V']:.3f}; exact c1={c['c1']:.4g} c2={c['c2']:.4g} "
        f"c3={c['c3']:.4g}; K* = 1+sqrt(c3/c1) = {c['K_star_exact']:.3g} "
        f"(paper's sqrt(c3/c1) = {c['K_star_paper']:.3g})"
    )
    for i, k in enumerate(args.K_list):
        print(f"K={k:3d}  " + "  ".join(f"{est.get(n).label}={summary['mse'][n][i]:.4g}" for n in args.estimators))
    print(f"oracle table: {oracle_path}\ntheory: {theory_path}")
