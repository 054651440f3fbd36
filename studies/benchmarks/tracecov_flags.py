"""What the benchmarks that run Gradient_evaluation/run_tracecov.py in a subprocess share: its flags for a
benchmark's model, table and shape, and the thread settings of the run."""


def thread_env(threads: int) -> dict:
    """Environment that holds torch (OpenMP, MKL) to ``threads`` threads, idle threads sleeping rather than spinning."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}


def tracecov_argv(args, save_json: str, dtype: str | None = None) -> list[str]:
    """run_tracecov.py's flags for ``args``' model, table and shape, in ``dtype`` (default ``args.dtype``)."""
    return [
        *("--model", args.model, "--oracle_table", args.oracle_table, "--device", "cpu"),
        *("--dtype", dtype or args.dtype),
        *("--T", str(args.T), "--M", str(args.M), "--K_list", *map(str, args.K_list)),
        *("--save_json", save_json, "--skip_plot"),
    ]
