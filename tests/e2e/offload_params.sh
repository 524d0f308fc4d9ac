# --offload params: the checkpointed blocks' weights rest in pinned host memory and come to the
# device per block (forward, then again for the recomputation), with the optimizer on the host.
# On cpu the loss curve is bitwise that of the same run without offload (--master-weights fp32
# for bf16-true), with clipping, accumulation and --offload-activations; saving and resuming give
# the uninterrupted curve; the weights show in the pinned-host account; plan predicts the device
# and pinned-host peaks to the byte; what cannot work is one usage line (exit 2).
source "$(dirname "$0")/common.bash" "$@"
GPT=(--model gpt2-tiny --dim 64 --depth 3 --heads 2 --batch 4 --seq-len 32 --eval-batches 1 --steps 4 --log-every 1
  --checkpoint blocks)

losses() { grep '"loss"' "$1" | sed 's/, "seconds": [0-9.e+-]*//'; }
same_curve() {  # name file-a file-b
  if [ "$(losses "$2" | wc -l)" = 4 ] && cmp -s <(losses "$2") <(losses "$3"); then ok; else
    fail "$1: --offload params changed the loss curve"; diff <(losses "$2") <(losses "$3") | head -4 >&2; fi
}

expect_error 2 "^leantrain: error: --offload params without --checkpoint: .* \(add --checkpoint blocks\)$" \
  "$LT" train --model gpt2-tiny --dim 64 --depth 3 --heads 2 --steps 1 --device cpu --offload params
expect_error 2 "^leantrain: error: --offload params with --fused-step" \
  "$LT" train "${GPT[@]}" --device cpu --offload params --fused-step
expect_error 2 "^leantrain: error: --offload params with --master-weights fp32" \
  "$LT" train "${GPT[@]}" --device cpu --precision bf16-true --offload params --master-weights fp32
expect_error 2 "^leantrain: error: --offload params with --stochastic-rounding" \
  "$LT" plan "${GPT[@]}" --precision bf16-true --offload params --stochastic-rounding

BF=(--device cpu --precision bf16-true --clip 0.5 --micro-batch 2)
expect_ok "$LT" train "${GPT[@]}" "${BF[@]}" --master-weights fp32 --metrics "$WORK/ref.jsonl" --metrics-json "$WORK/ref.json"
expect_ok "$LT" train "${GPT[@]}" "${BF[@]}" --offload params --metrics "$WORK/off.jsonl" --metrics-json "$WORK/off.json"
same_curve "bf16-true, --clip, --micro-batch" "$WORK/ref.jsonl" "$WORK/off.jsonl"

expect_ok "$LT" train "${GPT[@]}" --device cpu --offload-activations --metrics "$WORK/f32.jsonl"
expect_ok "$LT" train "${GPT[@]}" --device cpu --offload-activations --offload params --metrics "$WORK/f32off.jsonl"
same_curve "32-true with --offload-activations" "$WORK/f32.jsonl" "$WORK/f32off.jsonl"

VIT=(--model vit-tiny --dim 32 --depth 2 --heads 2 --batch 4 --eval-batches 1 --steps 4 --log-every 1 --checkpoint blocks)
expect_ok "$LT" train "${VIT[@]}" --device cpu --precision bf16-true --master-weights fp32 --metrics "$WORK/vit.jsonl"
expect_ok "$LT" train "${VIT[@]}" --device cpu --precision bf16-true --offload params --metrics "$WORK/vitoff.jsonl"
same_curve "vit-tiny" "$WORK/vit.jsonl" "$WORK/vitoff.jsonl"

# A LLaMA-family model (GQA, RoPE, RMSNorm; its buffers leave the parameter store too).
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LLAMA=(--config "$ROOT/bench/configs/llama-small.json" --data synthetic --batch 2 --seq-len 64 --steps 4 --log-every 1
  --eval-batches 1 --checkpoint blocks --device cpu --precision bf16-true --clip 1)
expect_ok "$LT" train "${LLAMA[@]}" --master-weights fp32 --metrics "$WORK/llama.jsonl"
expect_ok "$LT" train "${LLAMA[@]}" --offload params --metrics "$WORK/llamaoff.jsonl"
same_curve "llama" "$WORK/llama.jsonl" "$WORK/llamaoff.jsonl"

# Stopped after 2 steps, saved, resumed: the uninterrupted curve (the weights at rest are saved
# from their pinned homes).
expect_ok "$LT" train "${GPT[@]}" "${BF[@]}" --offload params --stop-at 2 --save "$WORK/ck" --metrics "$WORK/resumed.jsonl"
expect_ok "$LT" train --resume "$WORK/ck"
same_curve "resumed" "$WORK/off.jsonl" "$WORK/resumed.jsonl"

# LEANTRAIN_OFFLOAD_TRACE=1: a line per step with every phase's wall time, the curve unchanged;
# without it, no such line.
LEANTRAIN_OFFLOAD_TRACE=1 expect_ok "$LT" train "${GPT[@]}" "${BF[@]}" --offload params --metrics "$WORK/traced.jsonl"
expect_grep '^offload trace: step 4 forward=[0-9.]+ backward=[0-9.]+ fetch_wait=[0-9.]+ drain_wait=[0-9.]+ finish_wait=[0-9.]+ norm=[0-9.]+ early_steps=[0-9.]+ early_wait=[0-9.]+ device_wait=[0-9.]+ late_steps=[0-9.]+ copy_back_wait=[0-9.]+ step_wall=[0-9.]+ ms$' "$WORK/err" "the traced run's stderr"
same_curve "traced" "$WORK/off.jsonl" "$WORK/traced.jsonl"
expect_ok "$LT" train "${GPT[@]}" --device cpu --precision bf16-true --offload params
if grep -q "offload trace" "$WORK/err" "$WORK/out"; then fail "a trace line without LEANTRAIN_OFFLOAD_TRACE"; else ok; fi

expect_ok "$LT" plan "${GPT[@]}" --device-type cpu --precision bf16-true --clip 0.5 --micro-batch 2 --offload params --json
cp "$WORK/out" "$WORK/plan.json"
if python3 - "$WORK/plan.json" "$WORK/off.json" "$WORK/ref.json" <<'PY'; then ok; else fail "offload params: plan != measured, or the weights not on the host"; fi
import json, sys
plan, run, ref = (json.load(open(f)) for f in sys.argv[1:4])
host = run["pinned_host_categories_peak"]
assert host["parameter"] > 0 and host["optimizer_state"] > 0 and host["gradient"] > 0, host
assert run["peak_allocated_bytes"] < ref["peak_allocated_bytes"], (run["peak_allocated_bytes"], ref["peak_allocated_bytes"])
for k in ("peak_allocated_bytes", "peak_pinned_host_bytes", "pinned_host_categories_peak"):
    assert plan[k] == run[k], (k, plan[k], run[k])
assert plan["categories_peak"]["parameter"] == run["categories_peak"]["parameter"], (plan["categories_peak"], run["categories_peak"])
PY
finish
