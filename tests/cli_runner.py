"""Run many command lines fast: import the heavy libraries once, then fork one child per command line.

  python tests/cli_runner.py CASES.json   (a list of {"argv": [script.py, args...], "cwd", "env"})

Each child runs ``argv`` exactly as ``python script.py args...`` would (``__main__``, its own argv, cwd and
environment, stdout and stderr captured); the parent prints a JSON list of {returncode, stdout, stderr}.
Only the interpreter start and the library imports are shared, so a case costs a fraction of a second.
"""

import json
import os
import runpy
import sys
import tempfile
import traceback

WORKERS = 2


def child(case: dict, out_path: str, err_path: str) -> None:
    """Run one command line in this (forked) process and exit with its status."""
    os.chdir(case["cwd"])
    os.environ.update(case.get("env", {}))
    for fd, path in ((1, out_path), (2, err_path)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = list(case["argv"])
    code = 0
    try:
        runpy.run_path(case["argv"][0], run_name="__main__")
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if not isinstance(done.code, int) and done.code is not None:
            print(done.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import pandas  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import grpo_mse.runs.oracle  # noqa: F401
    import grpo_mse.runs.tracecov  # noqa: F401

    with open(sys.argv[1], encoding="utf-8") as handle:
        cases = json.load(handle)
    scratch = tempfile.mkdtemp(prefix="cli_runner_")
    results, running, queue = [None] * len(cases), {}, list(enumerate(cases))
    while queue or running:
        while queue and len(running) < WORKERS:
            index, case = queue.pop(0)
            paths = (os.path.join(scratch, f"{index}.out"), os.path.join(scratch, f"{index}.err"))
            pid = os.fork()
            if pid == 0:
                child(case, *paths)
            running[pid] = (index, paths)
        pid, status = os.wait()
        index, (out_path, err_path) = running.pop(pid)
        with (
            open(out_path, encoding="utf-8", errors="replace") as out,
            open(err_path, encoding="utf-8", errors="replace") as err,
        ):
            results[index] = {
                "returncode": os.waitstatus_to_exitcode(status),
                "stdout": out.read(),
                "stderr": err.read(),
            }
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
