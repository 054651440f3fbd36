#!/usr/bin/env bash
# Mutation testing of the maths rooms (issue 58; docs/tests.md): mutmut, configured in pyproject.toml [tool.mutmut],
# mutates grpo_mse/gradients, analysis, rewards and policy/logprobs.py in a copy (mutants/, git-ignored) and runs
# each mutant against the not-slow tests of those rooms that reach the mutated function. A development habit, not a
# CI step (CI installs mutmut with the dev tools and never runs it).
# Usage: bash scripts/mutation.sh [MUTANT_GLOB ...]   e.g. 'grpo_mse.gradients.memory*' (default: every mutant)
# Settings (environment): MUTATION_JOBS (mutants run at once, default 1), MUTATION_OUT (folder for the record,
# default results/mutation/DATE_COMMIT). mutmut keeps its verdicts in mutants/ and reruns only what changed; they are
# also saved to results/mutation/verdicts.json (commit it) and restored from there into a fresh checkout's mutants/,
# so a run that spans sessions or machines goes on where it stopped (studies/audits/mutation_state.py). Named
# mutants are always rerun (e.g. the survivors, after new tests). MUTATION_MEMORY_GB (default 4): the address space
# each process may take; a mutant that changes a size can ask for all the machine's memory, and on a shared machine
# the kernel's out-of-memory killer then takes the largest process, which may be someone's long run. Past the limit
# the mutant's test gets a MemoryError (the mutant counts as killed), and these processes are the first the kernel
# kills if memory still runs out.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
ulimit -v $((${MUTATION_MEMORY_GB:-4} * 1024 * 1024))
echo 1000 >/proc/self/oom_score_adj 2>/dev/null || true  # Linux: raising one's own score needs no privilege
# Subprocess tests (the scripts the tests start) import the mutated copy, so a mutant is live there too.
export PYTHONPATH="$PWD/mutants"
start=$(date +%s)
commit="$(git rev-parse HEAD)$(git diff --quiet HEAD -- grpo_mse tests pyproject.toml || echo ' (with uncommitted changes)')"
python scripts/mutation_state.py --action restore
status=0
trap 'python scripts/mutation_state.py --action save' EXIT  # also when stopped: the verdicts so far are kept
trap 'exit 143' TERM INT
mutmut run --max-children "${MUTATION_JOBS:-1}" "$@" || status=$?
out=${MUTATION_OUT:-results/mutation/$(date -u +%Y-%m-%d)_$(git rev-parse --short HEAD)}
mkdir -p "$out"
mutmut export-cicd-stats >/dev/null
cp mutants/mutmut-cicd-stats.json "$out/stats.json"
mutmut results --all true | grep -v ": not checked$" >"$out/results.txt" || true  # every verdict but "not checked"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $commit (when the run started)"
  echo "mutants selected: ${*:-all}"
  echo "seconds: $(($(date +%s) - start)) (MUTATION_JOBS=${MUTATION_JOBS:-1})"
  echo "mutmut exit status: $status"
} >"$out/run.txt"
echo "mutation: record in $out (stats.json, results.txt, run.txt)"
exit "$status"
