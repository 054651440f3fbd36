#!/usr/bin/env bash
# The advisor's K* map of one policy across six settings (issue 26 item 5): prompt difficulty (hard: V < 0.5,
# easy: V >= 0.5), diversity (narrow: two- and three-step + and - only, vs all five kinds) and temperature
# (0.7, 1, 1.3). Each setting is one run_tracecov.py run (M = 8, K = 2 4 8 16, top_p 0.95, one thread), then
# scripts/k_map.py writes the map (JSON + figure).
# Usage: KMAP_MODEL=assets/paper_policy KMAP_TABLE=<oracle table of >= 96 demo prompts> KMAP_OUT=outputs/k_map \
#        bash scripts/k_map.sh
# KMAP_OUT must not exist (nothing is replaced); KMAP_T (prompts per setting, 48).
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "k_map.sh: error: $*" >&2; exit 2; }
MODEL=${KMAP_MODEL:-assets/paper_policy}
TABLE=${KMAP_TABLE:-}
OUT=${KMAP_OUT:-outputs/k_map}
T=${KMAP_T:-48}
[ -f "$MODEL/config.json" ] || [ -n "${KMAP_MODEL:-}" ] || fail "model folder not found: $MODEL"
[ -n "$TABLE" ] && [ -f "$TABLE" ] || fail "KMAP_TABLE must name an oracle table (.jsonl) of the model"
[[ "$T" =~ ^[1-9][0-9]*$ ]] || fail "KMAP_T must be a positive integer (got '$T')"
[ ! -e "$OUT" ] || fail "KMAP_OUT $OUT exists; choose a new folder"
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
# subset FILTER NAME: the table's rows passing FILTER (a python expression of row `r` and its problem text `p`)
subset() {
  mkdir -p "$OUT/$2"
  python - "$TABLE" "$OUT/$2/$2.jsonl" "$1" <<'PY'
import json, sys
source, target, expression = sys.argv[1:]
rows = [json.loads(line) for line in open(source) if line.strip()]
keep = [r for r in rows if eval(expression, {"r": r, "p": r["prompt"][-1]["content"].splitlines()[-1]})]
with open(target, "w") as out:
    out.writelines(json.dumps(r) + "\n" for r in keep)
print(f"{target}: {len(keep)} of {len(rows)} rows")
PY
}
tracecov() {  # DIR TABLE TEMPERATURE
  python Gradient_evaluation/run_tracecov.py --model "$MODEL" --oracle_table "$2" --device cpu --dtype fp32 \
    --T "$T" --M 8 --K_list 2 4 8 16 --temperature "$3" --top_p 0.95 --gen_bs 256 --save_json "$1" --plot_path "$1"
}
subset "True" mixed_T1.0
subset "r['V_oracle'] < 0.5" hard_V_below_0.5
subset "r['V_oracle'] >= 0.5" easy_V_from_0.5
subset "not any(c in p for c in '*/(')" narrow_plus_minus_only
for name in mixed_T1.0 hard_V_below_0.5 easy_V_from_0.5 narrow_plus_minus_only; do
  tracecov "$OUT/$name" "$OUT/$name/$name.jsonl" 1.0
done
for temp in 0.7 1.3; do
  dir="$OUT/temp_$temp"
  mkdir -p "$dir"
  python Gradient_evaluation/calculate_oracle_v.py --model "$MODEL" --dataset data/arithmetic_zero_shot.jsonl \
    --device cpu --dtype fp32 --limit "$T" --n_oracle 256 --temperature "$temp" --top_p 0.95 --batch_size 256 \
    --out_dir "$dir"
  tracecov "$dir" "$dir"/oracle_v_n*.jsonl "$temp"
done
runs=()
for name in mixed_T1.0 hard_V_below_0.5 easy_V_from_0.5 narrow_plus_minus_only temp_0.7 temp_1.3; do
  runs+=("$(ls "$OUT/$name"/tracecov_*[0-9].json)")
done
python scripts/k_map.py --runs "${runs[@]}" --labels "mixed, temperature 1" "hard: V < 0.5" "easy: V >= 0.5" \
  "narrow: + and - only" "mixed, temperature 0.7" "mixed, temperature 1.3" --out "$OUT/k_map.json"
