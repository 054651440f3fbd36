#!/usr/bin/env bash
# The off-the-shelf SmolLM2-135M-Instruct's oracle tables (docs/real_llm.md): the first 96 prompts of the built-in
# zero-shot and few-shot datasets (the same problems), 64 samples each, the paper's sampling (temperature 1,
# top_p 0.95, 32 new tokens), fp32 on the CPU. Resumable: rerun the same command to continue after a stop (each
# prompt's line is written when its 64 samples are scored; --resume checks the settings and the model's sha256).
# Settings (environment): MODEL (default the installed GGUF file; the post-trained model: assets/smollm2_arith_lora),
# OUT (default results/real_llm/off_the_shelf), N_ORACLE (64), LIMIT (96), STYLES (zero_shot few_shot).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-$(python scripts/real_llm.py)}"
OUT="${OUT:-results/real_llm/off_the_shelf}"
for style in ${STYLES:-zero_shot few_shot}; do
  start=$(date +%s)
  python Gradient_evaluation/calculate_oracle_v.py --model "${MODEL}" --dataset "data/arithmetic_${style}.jsonl" \
    --device cpu --dtype fp32 --n_oracle "${N_ORACLE:-64}" --limit "${LIMIT:-96}" --batch_size 64 --seed 0 \
    --temperature 1.0 --top_p 0.95 --max_new_tokens 32 --out_dir "${OUT}/${style}" --resume
  echo "[real_llm_tables] ${style}: $(( $(date +%s) - start )) s wall on $(nproc) cores"
done
