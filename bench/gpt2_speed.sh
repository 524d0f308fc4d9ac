#!/usr/bin/env bash
# Issue 16's speed line in one device call: leantrain_bench throughput on GPT-2 124M (B16 x T1024,
# bf16-mixed, AdamW) in several variants, alternating over ROUNDS rounds, beside the leanest
# torch.compile peer (loss inside the compiled graph), on the same GPU. Run from the repo root:
#   BIN=gpu-carry/leantrain_bench OUT=$OUT ROUNDS=2 PEER=1 \
#     VARIANTS='default||;keep|--lean-saves 0|;tuned|--lean-saves 0|LEANTRAIN_GEMM_TUNE=1' bash bench/gpt2_speed.sh
# A variant is LABEL|EXTRA FLAGS|ENV ASSIGNMENTS[|BINARY]; each prints one JSON line tagged with its
# label (stderr goes to $OUT/LABEL.err, e.g. the GEMM tuner's lines). BINARY, when given, replaces
# $BIN for that variant (an A/B of two builds in one call). PEER_AFTER lists the rounds after which
# the peer runs (default 1; e.g. "1 3": twice, since the peer varies from machine to machine too).
# PEER_MODES lists torch.compile modes to run at each of those points (default "default"; e.g.
# "default max-autotune": the bar is against the fastest, and max-autotune compiles for minutes).
set -u
BIN=${BIN:-build/leantrain_bench}
OUT=${OUT:-/tmp/gpt2-speed}
ROUNDS=${ROUNDS:-2}
PEER=${PEER:-1}
MODEL=${MODEL:-gpt2-124m}
VARIANTS=${VARIANTS:-default||}
mkdir -p "$OUT"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit: ${COMMIT:-unknown}"
IFS=';' read -ra vs <<< "$VARIANTS"
for round in $(seq 1 "$ROUNDS"); do
  for v in "${vs[@]}"; do
    IFS='|' read -r label flags envs bin <<< "$v"
    line=$(env $envs timeout 240 "${bin:-$BIN}" throughput --device cuda --model "$MODEL" --precision bf16-mixed --batch 16 \
      --seq 1024 --warmup 5 --steps 20 $flags 2>"$OUT/$label.err" | tail -1)
    echo "{\"variant\": \"$label\", \"round\": $round, ${line#\{}" | tee -a "$OUT/speed.jsonl"
  done
  if [ "$PEER" = 1 ] && [[ " ${PEER_AFTER:-1} " == *" $round "* ]] && [ "$MODEL" = gpt2-124m ]; then
    for mode in ${PEER_MODES:-default}; do
      timeout 540 python3 bench/peers/gpt2_throughput_torch.py --compile --compile-mode "$mode" 2>&1 | tail -1 |
        tee -a "$OUT/speed.jsonl"
    done
  fi
done
