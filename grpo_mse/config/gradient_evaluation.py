"""Typed run configurations of the two gradient-evaluation scripts; their flags are made by grpo_mse.flags.

Each field is one command-line flag of the same name; its ``metadata`` holds the flag's help, type,
nargs, choices and bounds, so the flags, defaults, choices and bounds have a single definition. A bool field
is a ``store_true`` switch; a field without default is a required flag. ``__post_init__`` rejects values
that cannot work, and an environment the run cannot start in (torchrun variables, the device, the vLLM
backend, the model folder, the output folders), with a one-line ``UsageError``. Importing this module is
cheap (no torch).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import ClassVar

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, check_types, option
from grpo_mse.gradients.estimators import ALL as ALL_ESTIMATORS
from grpo_mse.gradients.estimators import GRPO, GRPO_STD, ORACLE, UNBIASED
from grpo_mse.gradients.memory_plan import RunSizes
from grpo_mse.gradients.trace_engines import ENGINES
from grpo_mse.policy import sampler_backends
from grpo_mse.policy.model_source import ModelSource, check_model_path, resolve
from grpo_mse.policy.sampler_backends import SAMPLERS
from grpo_mse.rewards.rules import ANSWER_RULES

DTYPES = ("fp16", "bf16", "fp32")
# logits / T overflows float32 and the score grows like 1/T: below 0.01 traces turn NaN (docs/safety.md)
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 100.0
MAX_SEED = 2**32 - 1  # random streams take 32-bit words: a negative or larger seed would alias another
# vLLM's SamplingParams raise above 2 and silently clamp 0 < T < 0.01 up to 0.01 (vllm/sampling_params.py).
VLLM_TEMPERATURE = (0.01, 2.0)


def check_vllm(config: ModelConfig) -> None:
    """Refuse what vLLM would reject or silently change, before any model or vLLM import: no CUDA, a device
    other than the first visible GPU, a temperature outside vLLM's range, a memory share outside (0, 1], and
    vLLM under torchrun (one GPU per rank)."""
    device, temperature, max_model_len = config.device, config.temperature, config.vllm_max_model_len
    require(device.startswith("cuda"), "--backend vllm needs --device cuda")
    index = device.partition(":")[2]
    require(
        index in ("", "0"),
        f"--backend vllm samples on the first visible GPU, so --device {device} would split "
        f"vLLM and the model over two GPUs; run CUDA_VISIBLE_DEVICES={index} ... --device cuda",
    )
    low, high = VLLM_TEMPERATURE
    require(
        low <= temperature <= high,
        f"--backend vllm needs {low} <= --temperature <= {high:g} (vLLM raises above {high:g} and silently "
        f"clamps below {low} up to {low}); got {temperature:g}: use --backend hf",
    )
    cli.check_range("--vllm_gpu_util", config.vllm_gpu_util, above=0, maximum=1)
    if max_model_len is not None:
        cli.check_range("--vllm_max_model_len", max_model_len, minimum=1)
    require(
        cli.launch_env()[0] == 1,
        "--backend vllm runs one vLLM LLM on the first visible GPU and cannot be sharded with torchrun; "
        "run one process per GPU (CUDA_VISIBLE_DEVICES=N) or use --backend hf",
    )


@dataclass(kw_only=True)
class ModelConfig(Flags):
    """The policy, its sampling settings and the sampling backend, shared by both scripts."""

    # bounds are checked after the environment (as these scripts always did: ``--M must be >= 2``)
    BOUNDS_AFTER_PARSE: ClassVar[bool] = True

    model: str = option(help="hub id, local folder or GGUF file")
    revision: str = option("main", help="model revision (branch, tag or commit)")
    device: str = option("cuda", help="torch device; under torchrun each rank takes cuda:LOCAL_RANK")
    dtype: str = option("fp16", choices=DTYPES, help="model weights' dtype")
    trust_remote_code: bool = option(False, help="allow the model's own code (off by default)")
    backend: str = option("hf", choices=SAMPLERS, help="sampler: hf (our seeded sampler, CPU/GPU) or vllm (GPU only)")
    vllm_gpu_util: float = option(0.4, type=float, help="vLLM gpu_memory_utilization")
    vllm_enforce_eager: bool = option(
        False, help="vLLM: no torch.compile or CUDA graphs (starts in seconds, samples slower; for short runs)"
    )
    vllm_max_model_len: int | None = option(
        None, type=int, help="vLLM max_model_len (default: the model's context length; smaller saves KV-cache memory)"
    )
    temperature: float = option(
        1.0, type=float, minimum=MIN_TEMPERATURE, maximum=MAX_TEMPERATURE, help="sampling temperature"
    )
    top_p: float = option(0.95, type=float, above=0, maximum=1, help="nucleus sampling mass")
    max_new_tokens: int = option(32, type=int, minimum=1, help="tokens per continuation at most")
    answer_rule: str = option(
        "row",
        choices=ANSWER_RULES,
        help="reward rule: row (each row's data_source rule; the original last integer without one) or "
        "final_answer (the response ends with the integer, alone or after =, : or 'is'; docs/real_llm.md)",
    )

    def __post_init__(self) -> None:
        check_types(self)  # before the checks below read the fields (a library caller's T="4", K_list=[])
        cli.check_device(self.device)
        cli.launch_env()  # a WORLD_SIZE without RANK (not torchrun) is refused before any work
        sampler = SAMPLERS.get(self.backend)  # an unknown name is refused with the other choices below
        if sampler is not None and sampler.check is not None:
            sampler_backends.load(sampler.check)(self)
        check_model_path(self.model)
        super().__post_init__()  # choices and bounds

    @functools.cached_property
    def model_source(self) -> ModelSource:
        """What --model names (hub id, folder, GGUF file, adapter folder), read from disk once for the run."""
        return resolve(self.model)

    @functools.cached_property
    def model_fingerprint(self) -> str:
        """Content hash of a local --model folder (weights, config, tokenizer; cached), ``hub:<id>@<revision>``
        for a hub id: --resume and the oracle-table check compare it, so a changed folder is never mixed in."""
        return self.model_source.fingerprint(self.revision)

    def record(self) -> dict:
        """Every field by name and the model's fingerprint (the ``config`` saved with the results)."""
        return {**dataclasses.asdict(self), "model_fingerprint": self.model_fingerprint}


@dataclass(kw_only=True)
class OracleConfig(ModelConfig):
    """calculate_oracle_v.py: Monte Carlo V(x) = P(reward = 1 | x) per prompt from n_oracle samples."""

    dataset: str = option(help="local .jsonl/.parquet/folder, or a hub dataset id")
    split: str = option("train", help="dataset split")
    n_oracle: int = option(1000, type=int, minimum=1, help="samples per prompt")
    batch_size: int = option(32, type=int, minimum=1, help="sequences per generation batch")
    seed: int = option(
        0, type=int, minimum=0, maximum=MAX_SEED, help="random seed (sample j of row i uses stream (seed, key_i, j))"
    )
    out_dir: str = option("oracle_v_results", help="output folder of the JSONL table")
    limit: int | None = option(None, type=int, minimum=1, help="only the first N rows")
    sample: int | None = option(
        None,
        type=int,
        minimum=1,
        help="a random sample of N rows drawn with --seed instead of all (e.g. an advisor's prompts from a "
        "training set; not with --limit)",
    )
    resume: bool = option(
        False, help="continue the newest file in --out_dir with equal settings (docs/safety.md), skipping done ids"
    )

    # Fields that change the numbers: --resume continues a file only when all of them are equal (the dataset
    # as its content fingerprint, saved beside the output in ``*.settings.json``).
    RESULT_FIELDS: ClassVar[tuple[str, ...]] = (
        "model",
        "model_fingerprint",
        "revision",
        "dataset",
        "split",
        "n_oracle",
        "seed",
        "temperature",
        "top_p",
        "max_new_tokens",
        "dtype",
        "backend",
        "sample",
        "answer_rule",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.sample is None or self.limit is None, "--sample and --limit both select rows; use one")
        cli.writable_dir(self.out_dir, "--out_dir")


SKETCH_FIELDS = ("sketch_dim", "sketch_blocks", "sketch_seed")  # saved only by a sketched run (see ``record``)


@dataclass(kw_only=True)
class TracecovConfig(ModelConfig):
    """run_tracecov.py: trace of covariance of each estimator per prompt, averaged over T prompts, per K."""

    # Fields that change the numbers: a resumed run must agree on all of them.
    # (the table as its content fingerprint ``oracle_table_fingerprint``, saved in the progress log's header)
    RESULT_FIELDS: ClassVar[tuple[str, ...]] = (
        "model",
        "model_fingerprint",
        "revision",
        "oracle_table_fingerprint",
        "dtype",
        "seed",
        "T",
        "M",
        "K_list",
        "temperature",
        "top_p",
        "max_new_tokens",
        "subsample_prompts",
        "drop_eos",
        "estimators",
        "shared_samples",
        "c1_batch",
        "no_advisor",
        "backend",
        "score_distribution",
        "answer_rule",
        *SKETCH_FIELDS,
    )

    model: str = option("Qwen/Qwen2.5-0.5B-Instruct", help="hub id, local folder or GGUF file")
    dtype: str = option("bf16", choices=DTYPES, help="model weights' dtype")
    oracle_table: str = option(help=".jsonl/.parquet with prompt, ground_truth, V_oracle (or VERL rows + V_oracle)")
    seed: int = option(
        0,
        type=int,
        minimum=0,
        maximum=MAX_SEED,
        help="random seed (sample j of prompt key at K uses stream (seed, K, key, j))",
    )
    T: int = option(
        500,
        type=int,
        minimum=1,
        help="prompts used: the first T of a shuffle seeded with --seed (all, in order, if no more rows)",
    )
    M: int = option(16, type=int, minimum=2, help="independent groups per prompt")
    K_list: list[int] = option([4, 8, 16, 32, 64], type=int, nargs="+", minimum=2, help="group sizes")
    gen_bs: int = option(64, type=int, minimum=1, help="max sequences per generation batch")
    subsample_prompts: int | None = option(
        None, type=int, minimum=1, help="randomly subsample this many rows of the table (seeded) before taking T"
    )
    save_json: str = option(help="output DIRECTORY for the JSON/CSV results")
    plot_path: str | None = option(None, help="output directory of the PNG (required unless --skip_plot)")
    skip_plot: bool = option(False, help="write no PNG")
    engine: str = option(
        "fast",
        choices=ENGINES,  # the registry itself: its keys, an engine registered later included
        help="fast: at most two vector-Jacobian products per group, several groups per batched "
        "backward call; reference: one backward pass per estimator (original); sketched: the fast engine's "
        "gradients through a seeded count sketch of --sketch_dim coordinates (unbiased; for models whose "
        "running sums do not fit, docs/engines.md)",
    )
    sketch_dim: int = option(
        1 << 20, type=int, minimum=4, help="sketched engine: coordinates of the sketch (its error is about 1/sqrt(d))"
    )
    sketch_blocks: int = option(
        4, type=int, minimum=2, help="sketched engine: independent blocks (their spread measures the sketch's error)"
    )
    sketch_seed: int = option(0, type=int, minimum=0, maximum=MAX_SEED, help="sketched engine: the signs' seed")
    groups_per_pass: int = option(
        0,
        type=int,
        minimum=0,
        help="fast engine: groups per forward pass and batched backward call (0 = auto: "
        "up to 128 sequences, at most 64 groups, within 2 GiB of gradients)",
    )
    estimators: list[str] = option(
        list(UNBIASED), nargs="+", choices=ALL_ESTIMATORS, help="estimators whose traces are computed"
    )
    drop_eos: bool = option(False, help="reproduce the original: leave a sampled EOS token out of log pi(y|x)")
    shared_samples: bool = option(
        False, help="draw M*max(K) continuations once per prompt and form every K's groups from them"
    )
    no_advisor: bool = option(False, help="skip the group-size advisor (c1, c2, c3, K*)")
    max_memory_gb: float | None = option(
        None,
        type=float,
        above=0,
        help="memory the run plans for, the model included (GB, finite; left out: all that is available, as inf "
        "would say, which is refused): the rest is left to other jobs on the machine",
    )
    c1_batch: int = option(
        16,
        type=int,
        minimum=1,
        help="prompts per batch for c1 (between-prompt variance); under torchrun a batch never spans two ranks",
    )
    score_distribution: str = option(
        "model",
        choices=("model", "sampling"),
        help="score of log pi_T, untruncated (the original's), or of the distribution "
        "sampled (temperature and renormalised top_p nucleus)",
    )
    advisor_estimator: str = option(
        GRPO,
        choices=(GRPO, GRPO_STD),
        help="advisor: the estimator training uses; grpo (the paper's: c1, c2, c3 and K*) or grpo_std (TRL's and "
        "VERL's default: its budgeted error measured at each K, no decomposition; needs grpo_std in --estimators)",
    )
    budget: int = option(
        1024, type=int, minimum=2, help="advisor: sequences per step N (the best allowed K divides it)"
    )
    allowed_K: list[int] | None = option(
        None,
        type=int,
        nargs="+",
        minimum=2,
        help="advisor: group sizes to choose from (default: the powers of two dividing --budget)",
    )
    resume: bool = option(
        False, help="continue the newest unfinished run in --save_json with equal settings (docs/safety.md)"
    )

    def record(self) -> dict:
        """The saved config; the sketch's settings only in a sketched run's (the other engines' numbers do not
        depend on them, and their saved configs stay as they were)."""
        saved = super().record()
        if self.engine != "sketched":
            for name in SKETCH_FIELDS:
                saved.pop(name)
        return saved

    def __post_init__(self) -> None:
        # no cap is said by leaving the flag out: inf would be saved in the run's config as non-standard JSON
        require(
            self.max_memory_gb != math.inf,
            "--max_memory_gb inf: leave the flag out to plan with all the memory available (a cap is a finite "
            "number of GB > 0)",
        )
        super().__post_init__()
        misfits = [k for k in self.allowed_K or [] if self.budget % k]
        require(
            not misfits,
            f"every K in --allowed_K must divide --budget {self.budget} (B = N/K prompts per step; "
            f"not {' '.join(map(str, misfits))})",
        )
        require(
            self.allowed_K is not None or self.budget % 2 == 0,
            f"--budget {self.budget} is odd: no power-of-two group size divides it; give an even --budget "
            "or list the sizes with --allowed_K",
        )
        require(
            self.c1_batch >= 2 or not self.with_advisor,
            "--c1_batch 1 leaves no pair of prompts to estimate c1 (between-prompt variance), so the advisor "
            "would be empty; use --c1_batch 2 or more, or --no_advisor",
        )
        require(self.skip_plot or bool(self.plot_path), "--plot_path is required unless --skip_plot")
        require(
            self.advisor_estimator != GRPO_STD or self.no_advisor or GRPO_STD in self.estimators,
            "--advisor_estimator grpo_std measures the std-normalised estimator: add grpo_std to --estimators",
        )
        require(
            self.engine != "sketched" or self.sketch_dim >= 16 * self.sketch_blocks,
            f"--sketch_dim {self.sketch_dim} is under 16 coordinates for each of --sketch_blocks "
            f"{self.sketch_blocks} (too few primes to size them); raise --sketch_dim (default {1 << 20})",
        )
        self.K_list, self.estimators = cli.unique(self.K_list, "--K_list"), cli.unique(self.estimators, "--estimators")
        cli.writable_dir(self.save_json, "--save_json")
        if not self.skip_plot:
            cli.writable_dir(self.plot_path, "--plot_path")

    @property
    def with_advisor(self) -> bool:
        """The group-size advisor runs unless switched off; it needs the grpo and oracleV traces."""
        return not self.no_advisor and {GRPO, ORACLE} <= set(self.estimators)

    @property
    def c1_copies(self) -> int:
        """Mean gradients a c1 batch holds per prompt: the oracle's, and with --advisor_estimator grpo_std also
        std-GRPO's and its difference from its own target (measured_curve)."""
        return 3 if self.with_advisor and self.advisor_estimator == GRPO_STD else 1

    def run_sizes(self) -> RunSizes:
        """The settings the run's memory plan depends on, as one typed record (``gradients.memory_plan``)."""
        return RunSizes(
            estimators=tuple(self.estimators),
            m=self.M,
            k_list=tuple(self.K_list),
            max_new_tokens=self.max_new_tokens,
            engine=self.engine,
            groups_per_pass=self.groups_per_pass,
            c1_batch=min(self.c1_batch, self.T) if self.with_advisor else 0,
            c1_reads=self.c1_copies if self.with_advisor else 0,
            max_memory_gb=self.max_memory_gb,
            sketch_dim=self.sketch_dim if self.engine == "sketched" else 0,
        )
