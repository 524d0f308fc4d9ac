#!/usr/bin/env bash
# The memory ladder (BENCHMARKS.md section 1) on the GPU machine: for each rung, leantrain then
# PyTorch (bench/peers/vit_ladder_torch.py), same model (ViT-L/16, 224x224x3, 10 classes), same
# batch and steps (6), synthetic images. Then leantrain-only rungs. One JSON line per run to
# $OUT/ladder.jsonl. Run from the repo root with prebuilt binaries in $BUILD (default build-gpu).
# img_per_s is the steady-state rate, computed as the peer computes it: (steps - 1) * batch over
# the seconds of steps 2..6 (from --metrics; each step's end is synchronised with the device).
set -u
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/leantrain-ladder}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
LT="./$BUILD/leantrain train --config bench/configs/vit-l-16-10cls.json --data synthetic --device cuda --steps 6
    --eval-batches 1 --log-every 6 --weight-decay 0 --warmup 0"
rung_flags() {
  case $1 in
    1) echo "--precision 32-true --optimizer adamw --lr 5e-5 --batch 64" ;;
    2) echo "--precision 16-mixed --optimizer adamw --lr 5e-5 --batch 64" ;;
    3) echo "--precision bf16-true --optimizer adamw --lr 5e-5 --batch 64" ;;
    4) echo "--precision bf16-true --optimizer adamw --lr 5e-5 --batch 16" ;;
    # Rung 5 with an 8 MiB cuBLASLt workspace instead of 32 (24 MiB of the 56 MB it was over 0.9x;
    # the attention output recomputed in the backward gives the rest). 5ws32: the default workspace.
    5) echo "--precision bf16-true --optimizer adamw --lr 5e-5 --batch 16 --micro-batch 4 --gemm-workspace 8MiB" ;;
    5ws32) echo "--precision bf16-true --optimizer adamw --lr 5e-5 --batch 16 --micro-batch 4" ;;
    6) echo "--precision bf16-true --optimizer sgd --momentum 0 --lr 0.01 --batch 16 --micro-batch 4" ;;
    # Rungs 7 and 8 accumulate breadth-first (--fused-step with micro-batches): every micro-batch's
    # forward, then one backward depth by depth, each block's gradient applied and freed once
    # complete. Accumulation's arithmetic bit for bit (tests/unit/test_fused_step.cpp), no
    # gradient buffer. 7buf and 8buf are the same rungs accumulating into a gradient buffer.
    7) echo "--precision bf16-true --optimizer sgd --momentum 0 --lr 0.01 --batch 16 --micro-batch 4 --checkpoint blocks --fused-step" ;;
    8) echo "--precision bf16-true --optimizer sgd --momentum 0 --lr 0.01 --batch 16 --micro-batch 1 --checkpoint blocks --fused-step" ;;
    7buf) echo "--precision bf16-true --optimizer sgd --momentum 0 --lr 0.01 --batch 16 --micro-batch 4 --checkpoint blocks" ;;
    8buf) echo "--precision bf16-true --optimizer sgd --momentum 0 --lr 0.01 --batch 16 --micro-batch 1 --checkpoint blocks" ;;
    # leantrain only: 8-bit AdamW in place of Adam (rung 5's config), and the fused step (which
    # keeps no gradient buffer, so it cannot accumulate: batch 1, SGD, checkpointed blocks) with no
    # cuBLASLt workspace (32 MiB of its 664 MB otherwise).
    8bit) echo "--precision bf16-true --optimizer adamw8bit --lr 5e-5 --batch 16 --micro-batch 4" ;;
    fused) echo "--precision bf16-true --optimizer sgd --momentum 0 --lr 0.01 --batch 1 --checkpoint blocks --fused-step --gemm-workspace 0" ;;
  esac
}
: > "$OUT/ladder.jsonl"
for r in ${RUNGS:-1 2 3 4 5 6 7 8 5ws32 7buf 8buf 8bit fused}; do
  # shellcheck disable=SC2046
  rm -f "$OUT/lt-$r.metrics.jsonl"
  timeout 300 $LT $(rung_flags "$r") --metrics-json "$OUT/lt-$r.json" --metrics "$OUT/lt-$r.metrics.jsonl" \
    > "$OUT/lt-$r.log" 2>&1
  rc=$?
  python3 - "$r" "$rc" "$OUT/lt-$r.json" "$OUT/lt-$r.log" "$(rung_flags "$r")" "$OUT/lt-$r.metrics.jsonl" \
    >> "$OUT/ladder.jsonl" <<'PY'
import json, re, sys
r, rc, path, log, flags, metrics = sys.argv[1:]
row = {"system": "leantrain", "rung": r, "rc": int(rc), "flags": flags}
text = open(log).read()
try:
    row.update(json.load(open(path)))
    # As bench/peers/vit_ladder_torch.py: (steps - 1) * batch / seconds of steps 2..N.
    secs = [json.loads(l)["seconds"] for l in open(metrics) if '"loss"' in l]
    batch = int(re.search(r"--batch (\d+)", flags).group(1))
    row["img_per_s"] = round((len(secs) - 1) * batch / sum(secs[1:]), 1)
    row["step_seconds"] = secs
    # The progress line of the last step (the same steady-state rate, rounded).
    rates = re.findall(r"step 6/6 .*?\| ([0-9.]+) img/s", text)
    row["img_per_s_progress"] = float(rates[-1]) if rates else None
except Exception:
    row["error"] = text[-600:]
print(json.dumps(row))
PY
  tail -1 "$OUT/ladder.jsonl"
  case $r in [1-8])
    timeout 300 python3 bench/peers/vit_ladder_torch.py --rung "$r" 2>"$OUT/pt-$r.err" | tail -1 | tee -a "$OUT/ladder.jsonl" ;;
  esac
done
echo "ladder done"
