# Sourced by the one-call device scripts (bench/issue*_call*.sh): BUILD and OUT with their
# defaults, OUT created, the GPU named, and el() printing the seconds since the start with a label.
#   CALL_OUT_DEFAULT=/tmp/callN; source bench/call_lib.sh
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-${CALL_OUT_DEFAULT:-/tmp/call}}
export BUILD
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

# smi_peak COMMAND...: runs it, then prints the highest nvidia-smi memory.used sample (MiB) taken
# every 200 ms while it ran (the whole GPU: the CUDA context included).
smi_peak() {
  local log=$OUT/smi.$$; : > "$log"
  ( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits >> "$log"; sleep 0.2; done ) &
  local sp=$!
  "$@"
  kill $sp 2>/dev/null; wait $sp 2>/dev/null
  echo "smi_peak_mib $(sort -n "$log" | tail -1)"
}

# llmc_shards: llm.c's token shards under $OUT/shards (bench/peers/llmc_shards.py).
llmc_shards() { python3 bench/peers/llmc_shards.py "$OUT/shards" > /dev/null 2>&1 || echo "llm.c shards not written"; }

# llmc_libs: the LD_LIBRARY_PATH llm.c's cuDNN build runs with: the pip cuDNN PyTorch ships (as the
# peer's README builds it; else the toolkit's), then the toolkit.
llmc_libs() {
  local cdl
  cdl=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib 2>/dev/null | head -1)
  echo "${cdl:-/usr/local/cuda/lib64}:/usr/local/cuda/lib64"
}

# llmc_round N: llm.c's cuDNN build ($LLMC) on GPT-2 124M B16 x T1024 for 40 steps (llmc_libs),
# under smi_peak; prints the mean of its steps 21-40. Log in $OUT/llmc-N.txt.
llmc_round() {
  smi_peak env LD_LIBRARY_PATH="$(llmc_libs)" bash -c "timeout 150 $LLMC \
    -i '$OUT/shards/train_*.bin' -j '$OUT/shards/val_*.bin' -e d12 -b 16 -t 1024 -d 16384 -x 40 -v 1000 -s 0 -h 0 \
    -o $OUT/llmc-log > $OUT/llmc-$1.txt 2>&1"
  python3 - "$OUT/llmc-$1.txt" <<'PY'
import re, sys
ms = [float(m.group(2)) for m in (re.search(r"step\s+(\d+)/\d+.*?\|\s*([\d.]+)\s*ms", l) for l in open(sys.argv[1]))
      if m and 21 <= int(m.group(1)) <= 40]
print(f"llm.c: {len(ms)} steps averaged, {sum(ms)/len(ms):.2f} ms/step, {16*1024*len(ms)/sum(ms)*1e3:,.0f} tok/s"
      if ms else "llm.c: no step lines (see llmc-N.txt)")
PY
}

# gpt2_bench LABEL ROUND "ENV=... ..." FLAGS...: leantrain_bench throughput on GPT-2 124M B16 x T1024
# bf16-mixed (20 timed steps after 5) under smi_peak; its JSON line in $OUT/gpt2-LABEL-ROUND.json
# and a one-line summary.
gpt2_bench() {
  local label=$1 round=$2 envs=$3; shift 3
  smi_peak bash -c "env $envs timeout 120 ./$BUILD/leantrain_bench throughput --device cuda --model gpt2-124m \
    --precision bf16-mixed --batch 16 --seq 1024 --warmup 5 --steps 20 $* 2>/dev/null | tail -1 > $OUT/gpt2-$label-$round.json"
  echo "gpt2 $label round $round: $(python3 -c "import json;d=json.load(open('$OUT/gpt2-$label-$round.json'));print(d['ms_per_step'],'ms',d['tokens_per_s'],'tok/s loss',d['final_loss'],'alloc',d['peak_allocated'],'reserved',d['peak_reserved'])" 2>&1 | tail -1)"
}

# tinyllama_run LABEL "FLAGS" ENV...: TinyLlama-1.1B with $TL_FLAGS (the call's common flags) and
# FLAGS, planned once per label and trained 15 steps under the ENV settings; the run's row
# (bench/tinyllama_row.py: tokens/s, MFU, peaks beside the plan's) goes to $OUT/tinyllama.jsonl.
# $round numbers the run.
tinyllama_run() {
  local label=$1 flags=$2; shift 2
  [ -f "$OUT/plan-$label.json" ] || env "$@" timeout 120 "./$BUILD/leantrain" plan $TL_FLAGS $flags --json \
    > "$OUT/plan-$label.json" 2> "$OUT/plan-$label.err"
  env "$@" timeout 150 "./$BUILD/leantrain" train $TL_FLAGS $flags --device cuda --steps 15 --eval-batches 0 --log-every 5 \
    --metrics-json "$OUT/tl-$label-$round.json" > "$OUT/tl-$label-$round.log" 2>&1 ||
    { echo "tinyllama $label failed: $(tail -1 "$OUT/tl-$label-$round.log")"; return; }
  python3 bench/tinyllama_row.py "$OUT/plan-$label.json" "$OUT/tl-$label-$round.json" "$label" "$round" | tee -a "$OUT/tinyllama.jsonl"
}

# train_vs_plan LABEL "ENV=... ..." TRAIN_FLAGS...: `leantrain plan` and a 12-step `leantrain train`
# with the same flags and settings; prints tokens/s and both peaks beside the plan's.
train_vs_plan() {
  local label=$1 envs=$2; shift 2
  env $envs timeout 120 "./$BUILD/leantrain" plan "$@" --json > "$OUT/plan-$label.json" 2> "$OUT/plan-$label.err"
  env $envs timeout 150 "./$BUILD/leantrain" train "$@" --device cuda --steps 12 --eval-batches 1 --log-every 6 \
    --metrics-json "$OUT/train-$label.json" > "$OUT/train-$label.log" 2>&1 || echo "train failed: $(tail -1 "$OUT/train-$label.log")"
  python3 - "$OUT/plan-$label.json" "$OUT/train-$label.json" "$label" <<'PY'
import json, sys
p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
same = (r["peak_allocated_bytes"], r["peak_reserved_bytes"]) == (p["peak_allocated_bytes"], p["peak_reserved_bytes"])
print(f"train {sys.argv[3]}: {round(r['steady_items_per_s'])} items/s; peak allocated {r['peak_allocated_bytes']} plan "
      f"{p['peak_allocated_bytes']}, reserved {r['peak_reserved_bytes']} plan {p['peak_reserved_bytes']}: {'equal' if same else 'DIFFER'}")
PY
}

# gpt2_beside_llmc "LABEL|FLAGS|ENV=... ..."...: GPT2_ROUNDS (2) rounds of gpt2_bench for each variant
# (cuDNN attention), each round then llm.c's ($LLMC, when set) on shards made first, removed last.
gpt2_beside_llmc() {
  [ -n "${LLMC:-}" ] && llmc_shards
  local round v label flags envs
  for round in $(seq 1 "${GPT2_ROUNDS:-2}"); do
    for v in "$@"; do
      IFS='|' read -r label flags envs <<< "$v"
      gpt2_bench "$label" "$round" "$envs" --attention-kernel cudnn $flags
    done
    [ -n "${LLMC:-}" ] && llmc_round "$round"
    el "gpt2 round $round"
  done
  rm -rf "$OUT/shards" "$OUT/llmc-log"
}

# gpu_tests FILTER: the GPU tests of leantrain_tests ($BUILD) matching FILTER, their summary.
gpu_tests() {
  timeout 240 "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter="$1" > "$OUT/unit.txt" 2>&1
  el "unit"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/unit.txt" | head -20
}

# tinyllama_beside OLD NEW [ENV...]: TinyLlama's default step and the checkpointed config
# (--checkpoint blocks --fused-step) with $TL_FLAGS, OLD's leantrain beside NEW's (NEW's runs under
# the ENV settings), alternating, two rounds (rows -old and plain in $OUT/tinyllama.jsonl); BUILD is
# NEW afterwards.
tinyllama_beside() {
  local old=$1 new=$2; shift 2
  for round in 1 2; do
    BUILD=$old tinyllama_run mfu-old ""
    BUILD=$new tinyllama_run mfu "" "$@"
    BUILD=$old tinyllama_run ckpt-old "--checkpoint blocks --fused-step"
    BUILD=$new tinyllama_run ckpt "--checkpoint blocks --fused-step" "$@"
    el "tinyllama round $round"
  done
  BUILD=$new
}
