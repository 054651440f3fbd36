#!/usr/bin/env bash
# Refactoring check: tiny run_tracecov.py runs on the built-in policy at an earlier commit and in this checkout give
# byte-identical JSON and CSV files (the saved --save_json path aside). Three runs: the advisor on (c1 batches),
# std-GRPO's advisor (its measured curve and own-target bias), and --no_advisor. The base commit's runs and this
# checkout's run side by side, one core each: about half a minute on two cores.
# Usage: bash scripts/same_outputs.sh BASE_COMMIT    (exit 0: identical; 1: a file differs, named)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: bash scripts/same_outputs.sh BASE_COMMIT" >&2; exit 2; }
git rev-parse --verify --quiet "$1^{commit}" > /dev/null || { echo "error: $1 is no commit of this repository" >&2; exit 2; }
HERE=$(pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/same_outputs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
git worktree add --quiet --detach "$WORK/tree" "$1"
trap 'git -C "$HERE" worktree remove --force "$WORK/tree"; rm -rf "$WORK"' EXIT
[ -d assets/tiny_policy ] || python scripts/build_tiny_policy.py > /dev/null
TABLE="$HERE/results/demo/oracle_v_n256_tiny_policy_20261201_225502.jsonl"
runs=(
  "a --T 12 --M 3 --K_list 2 4 --c1_batch 4"
  "b --T 9 --M 2 --K_list 2 4 --c1_batch 4 --estimators naive grpo oracleV grpo_std --advisor_estimator grpo_std"
  "c --T 6 --M 2 --K_list 2 --no_advisor"
)
# The two sides run side by side (one core each): each side's runs one after another.
run_side() {
  local side=$1 tree name flags run
  tree=$([ "$side" = base ] && echo "$WORK/tree" || echo "$HERE")
  for run in "${runs[@]}"; do
    read -r name flags <<< "$run"
    # shellcheck disable=SC2086  # the flags are words
    (cd "$tree" && PYTHONPATH="$tree" OMP_NUM_THREADS=1 python Gradient_evaluation/run_tracecov.py \
      --model "$HERE/assets/tiny_policy" --oracle_table "$TABLE" --device cpu --skip_plot \
      --save_json "$WORK/out/$side/$name" $flags > "$WORK/$side.$name.log" 2>&1) \
      || { echo "error: the $side run $name failed: $WORK/$side.$name.log" >&2; tail -3 "$WORK/$side.$name.log" >&2; return 1; }
  done
}
run_side base & base_pid=$!
run_side here & here_pid=$!
failed=0
wait "$base_pid" || failed=1
wait "$here_pid" || failed=1
[ "$failed" = 0 ] || exit 1
python - "$WORK/out" <<'EOF'
import glob, json, os, re, sys

work, differ = sys.argv[1], 0
for base in sorted(glob.glob(f"{work}/base/*/*")):
    name = re.sub(r"_\d{8}_\d{6}", "", os.path.relpath(base, f"{work}/base"))
    here = [p for p in glob.glob(f"{work}/here/*/*") if re.sub(r"_\d{8}_\d{6}", "", os.path.relpath(p, f"{work}/here")) == name]
    if len(here) != 1:
        print(f"differs: {name} (missing here)"); differ += 1; continue
    if name.endswith(".json") and not name.endswith("_detailed.json"):
        a, b = (json.load(open(p)) for p in (base, here[0]))
        for d in (a, b):
            d["config"].pop("save_json", None)
            d.pop("code", None)  # the commit that wrote the file differs by design
        same = a == b
    else:
        same = open(base, "rb").read() == open(here[0], "rb").read()
    print(("same:    " if same else "differs: ") + name)
    differ += not same
sys.exit(1 if differ else 0)
EOF
