"""Coverage of the joint prompt bootstrap's 95% intervals on heavy-tailed prompt populations.

Population: 30 exact prompt types (3 outcomes, one rewarded, explicit 4-d scores centred under p: every MSE and
c1, c3 is known in closed form, grpo_mse.analysis.theory); each prompt of a run draws a type uniformly and a score
scale exp(sigma Z), Z ~ N(0, 1), independent of the type, so its MSEs are scale^2 times its type's. With
sigma = 1 the largest prompt's share of the oracle's summed MSE is about 0.12-0.20 at T = 192, as in the demo.
Truth: ratios of mean MSEs (the scale cancels), c3 = E[scale^2] mean_t c3_t, c1 = E[scale^2] mean_t ||g_t||^2 -
E[scale]^2 ||mean_t g_t||^2. Each simulated run samples M groups of K per prompt, forms the per-prompt traces and
c1 batches as run_tracecov records them, and calls paired.run_statistics; an interval covers when it holds the
truth. Prints (and with --out writes) one row per (T, statistic): coverage and the median largest-prompt share.

  python scripts/coverage_heavy_tails.py --runs 200 --T 192 512 --out results/coverage/heavy_tails.json
"""

from __future__ import annotations

import numpy as np

from grpo_mse import cli
from grpo_mse.tables.outputs import write_json

TYPES, OUTCOMES, DIM, M, K_LIST, BATCH = 30, 3, 4, 8, (2, 4), 16
NAMES = ("naive", "grpo", "oracleV")


def population(rng) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(p, G, scores centred under p) per prompt type."""
    types = []
    for _ in range(TYPES):
        p = rng.dirichlet(2 * np.ones(OUTCOMES))
        rewards = np.array([1.0] + [0.0] * (OUTCOMES - 1))
        rng.shuffle(rewards)
        raw = rng.normal(size=(OUTCOMES, DIM))
        types.append((p, rewards, raw - p @ raw))
    return types


def truth(types, sigma: float) -> dict[str, float]:
    """Exact c1, c3, K*_exact and MSE ratios of the population with lognormal(0, sigma) score scales."""
    from grpo_mse.analysis import theory  # imports torch: after the flags are parsed

    moments = [theory.exact_moments(p, G, s @ s.T) for p, G, s in types]
    gradients = np.stack([(p * G) @ s for p, G, s in types])
    scale_sq, scale = np.exp(2 * sigma**2), np.exp(sigma**2 / 2)  # E[scale^2], E[scale]
    c1 = scale_sq * np.mean((gradients**2).sum(1)) - scale**2 * (gradients.mean(0) ** 2).sum()
    c3 = scale_sq * 2 * np.mean([m["var_zeta2"] for m in moments])
    out = {"c1": c1, "c3": c3, "K_star_exact": 1 + np.sqrt(c3 / c1)}
    for k in K_LIST:
        mse = {n: np.mean([theory.closed_form_mse(m, k, n) for m in moments]) for n in NAMES}
        for n in ("naive", "grpo"):
            out[f"{n}/oracleV@{k}"] = mse[n] / mse["oracleV"]
    return out


def traces(rng, types, chosen, scales, k):
    """Per-prompt traces over M groups of K (M-1 denominator) and the oracle estimates' means."""
    p = np.stack([types[t][0] for t in chosen])
    G = np.stack([types[t][1] for t in chosen])
    s = np.stack([types[t][2] for t in chosen]) * scales[:, None, None]
    draws = np.minimum(
        (rng.random((len(chosen), M, k))[..., None] > np.cumsum(p, 1)[:, None, None, :]).sum(-1), OUTCOMES - 1
    )
    rewards = np.take_along_axis(G[:, None, :], draws.reshape(len(chosen), 1, -1), 2).reshape(draws.shape)
    scores = np.take_along_axis(s, draws.reshape(len(chosen), -1, 1), 1).reshape(*draws.shape, DIM)
    value = (p * G).sum(1)[:, None, None]
    weights = {
        "naive": rewards / k,
        "grpo": (rewards - rewards.mean(2, keepdims=True)) / (k - 1),
        "oracleV": (rewards - value) / k,
    }
    vectors = {n: np.einsum("tmk,tmkd->tmd", w, scores) for n, w in weights.items()}
    return {n: v.var(1, ddof=1).sum(-1) for n, v in vectors.items()}, vectors["oracleV"].mean(1)


def simulated_run(rng, types, n_prompts: int, sigma: float, n_boot: int) -> tuple[dict, float]:
    """One run's statistics and the largest prompt's share of the oracle's summed MSE at the first K."""
    from grpo_mse.analysis import paired  # imports torch: after the flags are parsed

    chosen, scales = rng.integers(0, TYPES, n_prompts), np.exp(sigma * rng.normal(size=n_prompts))
    records, batches, share = {}, {}, None
    for k in K_LIST:
        per_prompt, means = traces(rng, types, chosen, scales, k)
        share = share if share is not None else paired.largest_share(per_prompt["oracleV"])
        records[k] = [
            {"K": k, "prompt_index": i, "V_oracle": 0.5, "tr_cov": {n: float(v[i]) for n, v in per_prompt.items()}}
            for i in range(n_prompts)
        ]
        batches[k] = []
        for start in range(0, n_prompts, BATCH):
            index = list(range(start, min(start + BATCH, n_prompts)))
            gram = means[index] @ means[index].T
            batches[k].append(
                {
                    "n": len(index),
                    "prompt_indices": index,
                    "gram": gram.tolist(),
                    "within_each": (per_prompt["oracleV"][index] / M).tolist(),
                }
            )
    out = paired.run_statistics(
        records, batches, list(K_LIST), list(NAMES), seed=int(rng.integers(1 << 30)), n_boot=n_boot, budget=64
    )
    return out, share


def intervals(out: dict) -> dict:
    """{statistic: 95% interval} for the statistics whose truth is known."""
    advice, ratios = out["group_size_advisor"], out["paired"]["ratio"]
    found = {name: advice["ci95"][name] for name in ("c1", "c3", "K_star_exact")}
    for i, k in enumerate(K_LIST):
        for name in ("grpo/oracleV", "naive/oracleV"):
            found[f"{name}@{k}"] = ratios[name][i]["ci95"]
    return found


def covers(interval, value: float) -> bool:
    if interval is None:
        return False
    low, high = (float(v) for v in interval)  # "inf" -> inf
    return low <= value <= high


def coverage(n_prompts: int, runs: int, sigma: float, n_boot: int, seed: int) -> dict:
    """{"T", "sigma", "runs", "largest_share_median", "coverage": {statistic: share of runs covered}}."""
    rng = np.random.default_rng(seed)
    types = population(rng)
    true = truth(types, sigma)
    hits, shares = dict.fromkeys(true, 0), []
    for _ in range(runs):
        out, share = simulated_run(rng, types, n_prompts, sigma, n_boot)
        shares.append(share)
        for name, interval in intervals(out).items():
            hits[name] += covers(interval, true[name])
    return {
        "T": n_prompts,
        "sigma": sigma,
        "runs": runs,
        "largest_share_median": float(np.median(shares)),
        "largest_share_quartiles": [float(q) for q in np.quantile(shares, [0.25, 0.75])],
        "coverage": {name: count / runs for name, count in hits.items()},
        "truth": true,
    }


def main(argv=None) -> None:
    parser = cli.ArgumentParser(description=__doc__)
    parser.add_argument("--T", type=cli.integer(minimum=16), nargs="+", default=[192, 512], help="prompts per run")
    parser.add_argument("--runs", type=cli.integer(minimum=1), default=200, help="simulated runs per T")
    parser.add_argument(
        "--sigma",
        type=cli.number(minimum=0),
        nargs="+",
        default=[1.0],
        help="lognormal sigma(s) of the score scale (one row per sigma and T)",
    )
    parser.add_argument("--n_boot", type=cli.integer(minimum=50), default=1000, help="bootstrap replicates")
    parser.add_argument("--seed", type=cli.integer(minimum=0), default=2026)
    parser.add_argument("--out", default=None, help="JSON file for the table (default: print only)")
    args = parser.parse_args(argv)
    if args.out:
        cli.writable_file(args.out, "--out")
    rows = [coverage(t, args.runs, sigma, args.n_boot, args.seed + t) for sigma in args.sigma for t in args.T]
    for row in rows:
        cells = "  ".join(f"{name}={value:.3f}" for name, value in row["coverage"].items())
        print(
            f"T={row['T']} sigma={row['sigma']} runs={row['runs']} largest share (median) "
            f"{row['largest_share_median']:.3f}: {cells}"
        )
    if args.out:
        write_json(args.out, {"rows": rows, "note": __doc__.split("\n\n")[1]})


if __name__ == "__main__":
    cli.run(main)
