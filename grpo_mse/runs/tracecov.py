"""The run of run_tracecov.py as one object (``TracecovRun``), read top to bottom as the algorithm: the T rows
and the policy (``start``) -> per K and prompt, M groups of K continuations sampled (``run_batch``) -> each
estimator's gradients and their trace statistics (``evaluate_prompt``) -> the paired and advisor statistics and
the files (``write_outputs``). Resume sits behind ``tables.resume`` (``open_progress``, ``load_progress``), torchrun
sharding behind ``distributed.Shards``; the helpers of each step follow the run."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict, dataclass, field, replace
from functools import partial

import torch

from grpo_mse import cli, distributed
from grpo_mse.analysis import paired
from grpo_mse.analysis.bootstrap import Summary, at_least_zero, below_zero_flag
from grpo_mse.config.gradient_evaluation import SKETCH_FIELDS, TracecovConfig
from grpo_mse.distributed import Shards
from grpo_mse.gradients import allocator, trace_engines
from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.engine import PromptStats, prompt_traces
from grpo_mse.gradients.memory_plan import MemoryPlan, check_memory, hold_to_plan, peak_line
from grpo_mse.gradients.statistics import BufferPool
from grpo_mse.gradients.trace_engines import EngineSettings
from grpo_mse.policy.loading import load_policy
from grpo_mse.policy.logprobs import PromptSampler
from grpo_mse.policy.model_source import model_tag
from grpo_mse.policy.sampler_backends import make_sampler
from grpo_mse.policy.sampling import ResponseLengths, SamplingSettings
from grpo_mse.rewards.rules import check_answer_rule, check_answers, row_reward
from grpo_mse.tables.inputs import (
    check_oracle_agreement,
    check_oracle_counts,
    check_oracle_values,
    check_prompt_lengths,
    check_prompts,
    load_rows,
    model_positions,
    prompt_ids,
    row_keys,
    selection,
    settings_mismatch,
)
from grpo_mse.tables.outputs import append_jsonl, code_version, write_csv, write_json
from grpo_mse.tables.records import (
    LENGTH_COLUMNS,
    TIDY_COLUMNS,
    V_ORACLE,
    PromptRecord,
    detailed,
    oracle_count,
    oracle_value,
    summary,
    tidy_rows,
)
from grpo_mse.tables.resume import RunFolder, fingerprint, load_progress, open_progress, progress_paths


@dataclass(frozen=True)
class TracecovOutcome:
    """What a tracecov run returns on rank 0 (``run_tracecov``): where its files are, the main JSON's content (the
    script draws the PNG and prints the summary from it, as make_figures.py draws from the saved file) and the
    typed statistics it holds."""

    base: str  # the saved results' stem: {base}.json, {base}_per_prompt.csv, {base}_K{k}_detailed.json
    result: dict  # the main JSON's content, written to json_path (non-finite numbers there as null)
    statistics: paired.RunStatistics  # its paired comparisons and the group-size advice (None when not asked)

    @property
    def json_path(self) -> str:
        return f"{self.base}.json"

    @property
    def csv_path(self) -> str:
        return f"{self.base}_per_prompt.csv"


def run_tracecov(config: TracecovConfig) -> TracecovOutcome | None:
    """The whole run of run_tracecov.py; its ``TracecovOutcome`` on rank 0, None on the other ranks."""
    run = TracecovRun.start(config)
    records_by_k = run.sweep()
    outcome = run.write_outputs(records_by_k) if run.rank == 0 else None
    run.close()
    if run.rank == 0:
        print(peak_line(run.memory_plan, str(run.sampler.model.device)), file=sys.stderr)
    return outcome


@dataclass
class TracecovRun:
    """One trace-of-covariance run, read top to bottom: ``start`` (rows, policy, run folder, progress log),
    ``sweep`` (per K: this rank's prompt batches -> ``run_batch`` -> ``evaluate_prompt``, then every rank's
    records merged and the per-K file), ``write_outputs`` (main JSON, CSV), ``close``. The group-size advisor,
    when on, observes the run (``advisor``: ``runs.advisor_hook.AdvisorHook``, told where each batch starts, handed
    each finished prompt, asked for the advice at the end).

    Progress: each finished prompt's record (and each c1 batch's record) is appended to this rank's log
    ``{base}.progress.rank{rank}.jsonl`` at once; ``done`` (and the advisor's ``batches``) hold what is finished,
    so a resumed run skips it. torchrun gives each rank a contiguous range of prompts, equal in length up to one,
    cut into batches of --c1_batch prompts, sampled together (``distributed.Shards``). Resume:
    ``resume.open_progress`` and ``resume.load_progress``.
    """

    config: TracecovConfig
    sampler: PromptSampler
    rows: list[dict]  # the T rows used, in order
    keys: list[int]  # their random-stream keys
    base: str = ""  # the run's stem: {base}.json, {base}_K{K}_detailed.json, {base}_per_prompt.csv
    saved_config: dict = field(default_factory=dict)  # the "config" of the outputs, checked on --resume
    rank: int = 0
    world: int = 1
    progress: str | None = None  # this rank's progress log (None: keep records in memory only)
    done: dict = field(default_factory=dict)  # {(K, prompt_index): PromptRecord}
    advisor: object = None  # runs.advisor_hook.AdvisorHook, or None when the advisor is off
    lock: object = None  # the progress log's lock, held until ``close``
    pool: BufferPool = field(default_factory=BufferPool)  # running sums' buffers, reused from prompt to prompt
    engine_settings: EngineSettings = field(default_factory=EngineSettings)  # the statistics engine, its settings
    memory_plan: MemoryPlan | None = None  # what the run was planned to hold (printed; c1's host share)

    @classmethod
    def start(cls, config: TracecovConfig) -> TracecovRun:
        """Rows, policy and checks (before any file is written), then a new run folder entry or the resumed one."""
        rank, world, device = distributed.init_from_env(config.device)
        if device == "cpu":
            allocator.reuse_freed_memory()  # gradients' pages reused from prompt to prompt (system time)
        rows, keys = select_rows(config)
        model, tokenizer = load_policy(
            config.model_source, device, config.dtype, config.revision, config.trust_remote_code
        )
        lengths = [len(prompt_ids(tokenizer, row["prompt"])) for row in rows]  # fails before any file is written
        check_prompt_lengths(lengths, config.max_new_tokens, model_positions(model), config.oracle_table)
        saved_config = {
            **config.record(),
            "device": device,
            "world_size": world,
            "oracle_table_fingerprint": fingerprint(config.oracle_table),
        }
        mismatch = settings_mismatch(rows, saved_config, record=True)
        if mismatch and rank == 0:
            print(f"warning: {mismatch}", file=sys.stderr)
        trainable = [p for p in model.parameters() if p.requires_grad]
        values = [oracle_value(row) for row in rows]  # how many gradient rows a prompt likely gives
        plan = check_memory(trainable, config.run_sizes(), device, model.config, max(lengths), values)
        if rank == 0:
            print(plan.line(), file=sys.stderr)
        hook = advisor_hook() if config.with_advisor else None  # its modules load only when it is on
        if hook is not None:
            hook.check(trainable, config, len(rows))
        folder = RunFolder(
            config.save_json,
            "tracecov_",
            ".progress.rank0.jsonl",
            TracecovConfig.RESULT_FIELDS,
            settings_in_marker=True,
        )
        name = f"tracecov_{model_tag(config.model_source)}"
        base, progress, run_lock = open_progress(
            folder, name, saved_config, config.resume, rank, distributed.broadcast_text
        )
        done, batches = load_progress(base)
        if done:
            print(f"resuming {base}: {len(done)} prompt results already done", file=sys.stderr)
        settings = SamplingSettings.of_run(config, model, tokenizer)
        sampler = PromptSampler(
            model,
            tokenizer,
            settings,
            config.gen_bs,
            config.seed,
            include_eos=not config.drop_eos,
            shared_prompt=trace_engines.load(config.engine).shared_prompt,
            source=make_sampler(config, model, settings, config.gen_bs),  # one prompt per sampler call
            score_distribution=config.score_distribution,
        )
        run = cls(config, sampler, rows, keys, base, saved_config, rank, world, progress, done, lock=run_lock)
        # a prompt's statistics take the plan's kept gradient rows at once (memory_plan.plan_run)
        sketch = {name: getattr(config, name) for name in SKETCH_FIELDS}  # the sketched engine's (the others ignore it)
        run.engine_settings = EngineSettings(config.engine, config.groups_per_pass, plan.kept_rows, **sketch)
        run.memory_plan = plan
        if hook is not None:
            layout = Shards.of(len(rows), config.c1_batch, rank, world).batches
            run.advisor = hook(config, layout, base, rank, plan.c1_bytes, run.pool, batches)
            line = run.advisor.memory_line(trainable)
            if rank == 0 and line:
                print(line, file=sys.stderr)
        return run

    def sweep(self) -> dict[int, list[PromptRecord]]:
        """Every K of the run: this rank's batches, then all ranks' records merged from the progress logs."""
        shards = Shards.of(len(self.rows), self.config.c1_batch, self.rank, self.world)
        all_batches = shards.batches  # batch id = position here
        records_by_k = {}
        for k in cli.progress(self.config.K_list, desc="K", disable=self.rank > 0):
            bar = cli.progress(total=shards.my_prompts(), desc=f"K={k} prompts", leave=False, disable=self.rank > 0)
            for b in shards.mine:
                self.run_batch(b, all_batches[b], k, on_prompt=lambda k=k, bar=bar: self.show_running_means(k, bar))
            bar.close()
            distributed.barrier()
            latest_done, latest_batches = load_progress(self.base)
            self.done.update(latest_done)
            if self.advisor is not None:
                self.advisor.batches.update(latest_batches)
            records_by_k[k] = [r for (rk, _), r in self.done.items() if rk == k]
            if self.rank == 0:
                write_json(f"{self.base}_K{k}_detailed.json", detailed(records_by_k[k], k, self.config.estimators))
        return records_by_k

    def run_batch(self, batch_id: int, indices: list[int], k: int, on_prompt=None) -> None:
        """Evaluate one batch of prompts at group size K, appending new records to the progress log.

        Finished prompts are skipped, except that the advisor may ask for the whole batch (its c1 record needs
        every prompt's mean gradient; results are deterministic per prompt, so nothing is duplicated)."""
        whole = self.advisor is not None and self.advisor.batch_started(k, indices)
        todo = [index for index in indices if whole or (k, index) not in self.done]
        # the batch's prompts are sampled together (up to --gen_bs sequences a decode batch, across prompts)
        drawn = self.sampler.draw_all([(self.rows[i], self.random_key(i, k)) for i in todo], self.config.M * k)
        drawn = dict(zip(todo, drawn))
        try:
            for index in indices:
                if index in drawn:
                    record, stats = self.evaluate_prompt(index, k, drawn.pop(index))
                    if (k, index) not in self.done:
                        self.append(record.to_json())
                        self.done[(k, index)] = record
                    if whole:
                        self.advisor.prompt_done(index, record, stats)
                    stats.release()  # its running sums' buffers go to the next prompt
                    hold_to_plan(self.memory_plan, str(self.sampler.model.device))
                if on_prompt:
                    on_prompt()
            if whole:
                self.append(self.advisor.batch_done(batch_id, k, indices).to_json())
        finally:  # an interrupted batch is evaluated whole on resume: its mean gradients' files are not kept
            if self.advisor is not None:
                self.advisor.discard()

    def random_key(self, index: int, k: int) -> tuple[int, int]:
        """Sample j of a prompt comes from stream (seed, K, key, j), or (seed, 0, key, j) with ``shared_samples``:
        then every K uses the first M*K samples of one sequence (nested groups)."""
        return (0, self.keys[index]) if self.config.shared_samples else (k, self.keys[index])

    def evaluate_prompt(self, index: int, k: int, drawn: tuple | None = None) -> tuple[PromptRecord, PromptStats]:
        """Sample M*K continuations of row ``index`` (or take ``drawn``, ``PromptSampler.draw``'s result), score
        them; return its record (tr_cov per estimator) and stats."""
        config, row, m = self.config, self.rows[index], self.config.M
        ids, continuations, texts = drawn or self.sampler.draw(row, self.random_key(index, k), m * k)
        rewards = torch.tensor([row_reward(row, t, config.answer_rule) for t in texts])
        groups = [continuations[g * k : (g + 1) * k] for g in range(m)]
        params = [p for p in self.sampler.model.parameters() if p.requires_grad]
        value = oracle_value(row)
        vanilla_biased = est.VANILLA in config.estimators and paired.score_law_mismatch(
            self.sampler.score_distribution, self.sampler.settings.top_p, self.sampler.include_eos
        )
        settings = replace(self.engine_settings, measure_score=0.0 < value < 1.0 or (vanilla_biased and value > 0.0))
        logprob_fn, grouped = self.sampler.logprob_fn(ids), rewards.view(m, k)
        stats = prompt_traces(logprob_fn, params, groups, grouped, value, config.estimators, settings, self.pool)
        if vanilla_biased:  # vanilla's mean differs from the baselined estimators' by V E_q[s]
            stats.bias2 = {**stats.bias2, est.VANILLA: paired.vanilla_bias2(value, stats.mean_score_sq)}
            if stats.blocks is not None:
                stats.blocks.bias2[est.VANILLA] = [paired.vanilla_bias2(value, s) for s in stats.blocks.mean_score_sq]
        biased = bool(stats.bias2)  # biased estimators: MSE = trace of covariance + squared bias
        record = PromptRecord(
            k,
            index,
            row.get("id", index),
            row["prompt"],
            row["ground_truth"],
            value,
            float(rewards.mean()),
            stats.traces,
            bias2=stats.bias2 if biased else None,
            mse={n: stats.traces[n] + stats.bias2.get(n, 0.0) for n in config.estimators} if biased else None,
            **score_fields(stats, row),
            **asdict(ResponseLengths.of(continuations, self.sampler.settings)),
            sketch_mse=stats.blocks.mse(config.estimators) if stats.blocks is not None else None,
        )
        return record, stats

    def append(self, record: dict) -> None:
        if self.progress is not None:
            append_jsonl(self.progress, record)

    def show_running_means(self, k: int, bar) -> None:
        """Advance the prompt bar and show each estimator's running mean trace at K."""
        finished = [r for (rk, _), r in self.done.items() if rk == k]
        bar.update(1)
        if finished:
            bar.set_postfix(
                {n[:6]: f"{sum(r.tr_cov[n] for r in finished) / len(finished):.3g}" for n in self.config.estimators}
            )

    def write_outputs(self, records_by_k: dict) -> TracecovOutcome:
        """The main JSON (with the advisor's advice) and the per-prompt CSV."""
        config, base = self.config, self.base
        result = summary(records_by_k, config.K_list, config.estimators, self.saved_config)
        advice = None
        if self.advisor is not None:  # the advice, a function of the bootstrap weights the paired section uses
            advice = partial(self.advisor.advice, records_by_k)
        statistics = paired.run_statistics(records_by_k, config.K_list, config.estimators, config.seed, advice=advice)
        result.update(statistics.to_json())
        result["code"] = code_version()
        outcome = TracecovOutcome(base, result, statistics)
        write_json(outcome.json_path, result)
        all_records = [r for k in config.K_list for r in records_by_k[k]]
        write_csv(outcome.csv_path, tidy_rows(all_records, config.estimators), TIDY_COLUMNS)
        return outcome

    def close(self) -> None:
        """After every rank is done: rank 0 removes the progress logs (and any c1 file a crash left); release the
        lock and the process group."""
        distributed.barrier()
        if self.rank == 0:
            spilled = self.advisor.spilled_files(self.base) if self.advisor is not None else []
            for path in progress_paths(self.base) + spilled:
                os.remove(path)
        if self.lock is not None:
            self.lock.close()
        distributed.finish()


# The steps' helpers


def select_rows(config: TracecovConfig) -> tuple[list[dict], list[int]]:
    """The T rows used (after the optional seeded subsample) and their random-stream keys."""
    rows = load_rows(config.oracle_table, required=("prompt", "ground_truth", V_ORACLE))
    keys = row_keys(rows)
    order = selection(len(rows), config.T, config.seed, config.subsample_prompts)
    if config.T > len(order):
        print(f"note: --T {config.T} > {len(order)} rows available; using all {len(order)}", file=sys.stderr)
    chosen = [rows[i] for i in order]
    for check in (check_prompts, check_answers, check_oracle_values, check_oracle_counts, check_oracle_agreement):
        check(chosen, config.oracle_table)
    check_answer_rule(chosen, config.answer_rule, config.oracle_table)
    return chosen, [keys[i] for i in order]


def score_fields(stats: PromptStats, row: dict) -> dict:
    """||E s||^2 (unbiased; nan unless measured, i.e. 0 < V < 1), the oracle-noise bias Var(V_hat) tr Cov(s_g)
    with Var(V_hat) estimated by V_hat (1 - V_hat) / (n_oracle - 1) (0 for an exact V), and the estimators with an
    own target in the registry (std-GRPO: g / sqrt(V (1 - V))) against it."""
    value = oracle_value(row)
    noise = paired.oracle_value_variance(value, oracle_count(row))
    fields = {
        "mean_score_sq": stats.mean_score_sq if 0.0 < value < 1.0 else float("nan"),
        "oracle_noise": noise * stats.score_trace if noise else 0.0,
    }
    if stats.bias2_own:
        fields["bias2_own"] = stats.bias2_own
        fields["mse_own"] = {n: stats.traces[n] + b for n, b in stats.bias2_own.items()}
    return fields


def summary_lines(result: dict) -> list[str]:
    """What run_tracecov.py prints: each K's MSE (tr Cov + bias², the quantity of the figure and the paired ratios;
    tr Cov when the run has no bias) with 95% half-widths, the paired ratios, the advisor."""
    names, lines = list(result["conditional_on_x"]), []
    mse, half_width = result["conditional_on_x"], result["ci95"]
    if isinstance(result.get("mse"), dict) and set(result["mse"]) == set(names):
        mse, half_width = result["mse"], result.get("mse_ci95", half_width)
        lines.append("MSE = tr Cov + bias² (mean over prompts) ± 95% half-width:")
    for i, k in enumerate(result["K_list"]):
        cells = [
            f"{est.get(n).label}={mse[n][i]:.4g}{paired.half_width_text(half_width[n][i])}"
            + below_zero_flag(at_least_zero(Summary(estimate=mse[n][i], ci95=None)))  # an unbiased MSE can be < 0
            for n in names
        ]
        lines.append(f"K={k:4d}  " + "  ".join(cells))
    if "response_lengths" in result:
        lines.append(length_line(result))
    if "paired" in result:
        lines.append(paired.describe(result["paired"]))
    lines += mix_lines(result)
    if "sketch_error" in result:
        lines.append(sketch_line(result))
    if "group_size_advisor" in result:
        from grpo_mse.analysis import advisor  # the advisor's modules load only with its advice

        lines.append(advisor.describe(result["group_size_advisor"]))
    return lines


def mix_lines(result: dict) -> list[str]:
    """The V mix's prediction beside the measured ratios, and the mean over prompts with 0 < V < 1 beside the
    all-prompt mean (``records.mix_summary``)."""
    lines = []
    if "equal_norm_ratio" in result:
        predicted = result["equal_norm_ratio"]["naive/oracleV"]
        u_statistic = " ".join(f"{k / (k - 1):.3g}" if k > 1 else "-" for k in result["K_list"])
        lines.append(
            f"under equal score norms: naive/oracleV = sum V / sum V(1-V) = {predicted:.3g} (the prompts' V mix), "
            f"grpo/oracleV = K/(K-1) = {u_statistic}; compare the measured ratios above"
        )
    if "mse_0<V<1" in result:
        for i, k in enumerate(result["K_list"]):
            cells = [f"{est.get(n).label}={means[i]:.4g}" for n, means in result["mse_0<V<1"].items()]
            count = result["n_prompts_0<V<1"][i]
            lines.append(f"K={k:4d}  over the {count} prompts with 0<V<1 (above: all prompts): " + "  ".join(cells))
    return lines


def sketch_line(result: dict) -> str:
    """The sketched engine's own error beside the intervals (``records.sketch_summary``)."""
    error, config = result["sketch_error"], result["config"]
    shares = [
        (share, name, k) for name, per_k in error["share_of_ci95"].items() for share, k in zip(per_k, result["K_list"])
    ]
    worst = max(shares, key=lambda item: -1.0 if math.isnan(item[0]) else item[0])
    ratio = max((sd for per_k in error["ratio_sd"].values() for sd in per_k), default=math.nan)
    return (
        f"sketch (d={config['sketch_dim']}, {error['blocks']} blocks, seed {config['sketch_seed']}): "
        f"its own error's sd is at most {worst[0]:.2%} of an MSE's 95% half-width "
        f"({est.get(worst[1]).label} at K={worst[2]}); "
        f"a ratio's at most {ratio:.2g}"
    )


def length_line(result: dict) -> str:
    """The responses' lengths per K (means over prompts): what sets the scale of the score norms and MSEs."""
    lengths, cap = result["response_lengths"], result["config"]["max_new_tokens"]
    cells = [
        f"K={k} {tokens:.3g} tokens ({eos:.0%} EOS, {cut:.0%} cut)"
        for k, tokens, eos, cut in zip(result["K_list"], *(lengths[name] for name in LENGTH_COLUMNS))
    ]
    return f"responses (mean new tokens; ended by EOS; cut at --max_new_tokens {cap}): " + "; ".join(cells)


def advisor_hook():
    """The group-size advisor's hook class (``runs.advisor_hook``), imported only by a run with the advisor on."""
    from grpo_mse.runs.advisor_hook import AdvisorHook

    return AdvisorHook
