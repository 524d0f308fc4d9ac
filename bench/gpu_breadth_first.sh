#!/usr/bin/env bash
# The GPU checks of the breadth-first fused step and attention_linear (issue #16), in two calls
# of the device tool. Run from the repo root with the stripped binaries in $BIN (leantrain,
# leantrain_tests, leantrain_bench); summaries and JSON lines under $OUT.
#   PART=a: the CUDA unit tests that cover the changed code (ops on cuda, fused step,
#           checkpointing, autograd), ViT parity with transformers, ladder rungs 5, 7, 8 (PyTorch
#           peers in the same call) and the leantrain-only rows 5ws32, 7buf, 8buf.
#   PART=b: the other rungs (1-4, 6 with peers; 8bit, fused) and the accuracy ladder's rungs 1, 7, 8.
#   PART=c: the accuracy ladder's rung 8 alone (longer limit), GPT-2 124M against torch.compile.
set -u
BIN=${BIN:-gpu-carry/bin}
OUT=${OUT:-/tmp/leantrain-bf}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu, commit: ${COMMIT:-unknown}, part ${PART:-a}"
case ${PART:-a} in
  a)
    timeout 240 "$BIN/leantrain_tests" --gtest_color=no \
      --gtest_filter='*cuda*:*Cuda*:FusedStep.*:RecomputeLinear.*:Checkpoint*:AutogradHooks.*' >"$OUT/unit-full.log" 2>&1
    echo "unit tests rc=$?"
    grep -E '^\[==========\]|^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \] [0-9]' "$OUT/unit-full.log" | tee "$OUT/unit.txt"
    timeout 200 python3 bench/peers/parity.py --bench "$BIN/leantrain_bench" --out "$OUT" --only vit-small,vit-b-16 2>&1 | tail -12
    BUILD=$BIN OUT=$OUT RUNGS="5 7 8 5ws32 7buf 8buf" timeout 330 bash bench/ladder.sh 2>&1 | tail -12
    ;;
  b)
    # Logs in a scratch folder; only the summaries go to $OUT (the device tool returns a few files).
    W=${WORK:-/tmp/leantrain-bf-work}
    mkdir -p "$W"
    BUILD=$BIN OUT=$W RUNGS="1 2 3 4 6 8bit fused" timeout 330 bash bench/ladder.sh 2>&1 | tail -12
    BUILD=$BIN OUT=$W DEVICE=cuda DATA=${DATA:-gpu-tests/fashion-mnist} RUNGS="1 7 8" timeout 250 bash bench/accuracy_ladder.sh 2>&1 | tail -8
    cp "$W/ladder.jsonl" "$OUT/ladder-b.jsonl"
    cp "$W/accuracy_ladder.md" "$W/accuracy_ladder.jsonl" "$OUT/" 2>/dev/null
    ;;
  c)
    # The accuracy ladder's rung 8 (64 micro-batches breadth-first, with a norm pass: about 5 min),
    # then GPT-2 124M against torch.compile (issue #16's speed line) after the engine changes.
    W=${WORK:-/tmp/leantrain-bf-work}
    mkdir -p "$W"
    BUILD=$BIN OUT=$W DEVICE=cuda DATA=${DATA:-gpu-tests/fashion-mnist} RUNGS="8" RUN_TIMEOUT=330 timeout 340 \
      bash bench/accuracy_ladder.sh 2>&1 | tail -3
    cp "$W/accuracy_ladder.jsonl" "$OUT/accuracy_ladder_rung8.jsonl" 2>/dev/null
    timeout 90 "$BIN/leantrain_bench" throughput --device cuda --model gpt2-124m --precision bf16-mixed \
      --batch 16 --seq 1024 --warmup 5 --steps 20 2>&1 | tail -1 | tee "$OUT/throughput.jsonl"
    timeout 170 python3 bench/peers/gpt2_throughput_torch.py --compile 2>&1 | tail -1 | tee -a "$OUT/throughput.jsonl"
    ;;
esac
