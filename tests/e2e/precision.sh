# --precision, --master-weights and --fused-step through the CLI: runs, what they print and save,
# resume and generate in 16-bit, and the combinations refused with a usage error.
source "$(dirname "$0")/common.bash" "$@"
TOOL="python3 $(dirname "$0")/safetensors_tool.py"
GPT=(--model gpt2-tiny --dim 32 --depth 2 --heads 2 --batch 4 --seq-len 32 --eval-batches 1 --device cpu)

losses() { grep '"loss"' "$1" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }

expect_ok "$LT" train "${GPT[@]}" --steps 3 --precision bf16-mixed --metrics "$WORK/mixed.jsonl"
expect_grep "^precision bf16-mixed$" "$WORK/out"
if python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$WORK/mixed.jsonl"; then ok; else
  fail "metrics of a bf16-mixed run are not JSON lines"; fi

expect_ok "$LT" train "${GPT[@]}" --steps 2 --precision 16-mixed --metrics "$WORK/m16.jsonl"
if python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$WORK/m16.jsonl"; then ok; else
  fail "metrics of a 16-mixed run are not JSON lines"; fi

expect_ok "$LT" train "${GPT[@]}" --steps 2 --precision 16-true
expect_grep "^warning: --precision 16-true trains in f16 without loss scaling" "$WORK/out"

# bf16-true with master weights: 16-bit weights in the model file, f32 masters in the optimizer's;
# --resume alone restores the policy; generate builds the model in bf16.
expect_ok "$LT" train "${GPT[@]}" --steps 4 --stop-at 2 --precision bf16-true --master-weights fp32 --save "$WORK/ck"
expect_grep "^precision bf16-true with f32 master weights$" "$WORK/out"
$TOOL check "$WORK/ck/model.safetensors" >"$WORK/names" && ok || fail "model.safetensors does not parse"
expect_grep "^transformer.wte.weight BF16 \[256, 32\]" "$WORK/names" "model.safetensors tensors"
$TOOL check "$WORK/ck/optimizer.safetensors" >"$WORK/names" && ok || fail "optimizer.safetensors does not parse"
expect_grep "^transformer.wte.weight.master F32 \[256, 32\]" "$WORK/names" "optimizer.safetensors tensors"
expect_ok "$LT" train --resume "$WORK/ck"
expect_grep "^precision bf16-true with f32 master weights$" "$WORK/out"
expect_grep "final: steps 4" "$WORK/out"
expect_ok "$LT" generate --checkpoint "$WORK/ck" --prompt "the " --max-new-tokens 5 --device cpu

# Stochastic rounding is reproducible and resumable: the random bits are keyed on (seed, step,
# parameter, element), so a run stopped and resumed draws what the uninterrupted run drew.
expect_ok "$LT" train "${GPT[@]}" --steps 4 --precision bf16-true --stochastic-rounding --metrics "$WORK/sr.jsonl"
expect_grep "^precision bf16-true with stochastic rounding$" "$WORK/out"
expect_ok "$LT" train "${GPT[@]}" --steps 4 --stop-at 2 --precision bf16-true --stochastic-rounding --save "$WORK/cksr" \
  --metrics "$WORK/sr2.jsonl"
expect_ok "$LT" train --resume "$WORK/cksr"  # the settings (metrics file included) come from the checkpoint
expect_grep "^precision bf16-true with stochastic rounding$" "$WORK/out"
losses "$WORK/sr.jsonl" >"$WORK/a"
losses "$WORK/sr2.jsonl" >"$WORK/b"
if [ "$(wc -l <"$WORK/a")" = 4 ] && diff "$WORK/a" "$WORK/b" >/dev/null; then ok; else
  fail "stochastic rounding: resumed losses differ from the uninterrupted run"; paste "$WORK/a" "$WORK/b" >&2; fi

# The fused step trains the same curve as the usual step.
expect_ok "$LT" train "${GPT[@]}" --steps 3 --metrics "$WORK/plain.jsonl"
expect_ok "$LT" train "${GPT[@]}" --steps 3 --fused-step --metrics "$WORK/fused.jsonl"
expect_grep "optimizer step fused into backward" "$WORK/out"
losses "$WORK/plain.jsonl" >"$WORK/a"
losses "$WORK/fused.jsonl" >"$WORK/b"
if [ "$(wc -l <"$WORK/a")" = 3 ] && diff "$WORK/a" "$WORK/b" >/dev/null; then ok; else
  fail "fused-step losses differ"; paste "$WORK/a" "$WORK/b" >&2; fi

expect_error 2 "--precision fp16: the choices are 32-true, 16-mixed, bf16-mixed, 16-true or bf16-true" "$LT" train --precision fp16
expect_error 2 "--master-weights fp32 with --precision 32-true: its parameters are already f32" "$LT" train --master-weights fp32
expect_error 2 "--stochastic-rounding with --precision 32-true: it rounds updates into 16-bit parameters" "$LT" train --stochastic-rounding
expect_error 2 "--stochastic-rounding with --precision bf16-mixed" "$LT" train --stochastic-rounding --precision bf16-mixed
expect_error 2 "--stochastic-rounding with --master-weights fp32: the f32 master copies already keep every update" \
  "$LT" train --stochastic-rounding --precision bf16-true --master-weights fp32
expect_error 2 "--stochastic-rounding with --precision 32-true" "$LT" plan --stochastic-rounding
expect_error 2 "--fused-step with --micro-batch 4 < --batch 16 and no --checkpoint" "$LT" train --fused-step --batch 16 --micro-batch 4
# With checkpointing the step runs breadth-first (docs/user-guide.md): accepted, and it trains.
if "$LT" train --model vit-tiny --data synthetic --steps 2 --batch 8 --micro-batch 2 --checkpoint blocks --device cpu \
  --eval-batches 1 --fused-step >"$WORK/fm" 2>&1; then ok; else fail "--fused-step --micro-batch 2 failed: $(tail -2 "$WORK/fm")"; fi
# --fused-step with --clip runs a norm pass first (docs/user-guide.md): accepted, and it trains.
if "$LT" train --model vit-tiny --data synthetic --steps 2 --batch 8 --device cpu --eval-batches 1 --fused-step --clip 1 \
  >"$WORK/fc" 2>&1; then ok; else fail "--fused-step --clip 1 failed: $(tail -2 "$WORK/fc")"; fi
expect_error 2 "--fused-step with --precision 16-mixed" "$LT" train --fused-step --precision 16-mixed

# --keep-casts: the same losses as casting each step; refused where there is nothing to keep.
expect_ok "$LT" train "${GPT[@]}" --steps 3 --precision bf16-mixed --keep-casts --metrics "$WORK/kept.jsonl"
expect_grep "^precision bf16-mixed with kept 16-bit weight copies$" "$WORK/out"
if [ "$(losses "$WORK/kept.jsonl")" = "$(losses "$WORK/mixed.jsonl")" ] && [ -n "$(losses "$WORK/kept.jsonl")" ]; then ok; else
  fail "--keep-casts changed the losses: $(losses "$WORK/kept.jsonl" | tr '\n' ' ') vs $(losses "$WORK/mixed.jsonl" | tr '\n' ' ')"; fi
expect_error 2 "--keep-casts with --precision 32-true: it keeps the 16-bit copies" "$LT" train --keep-casts
expect_error 2 "--keep-casts with --precision bf16-true" "$LT" plan --keep-casts --precision bf16-true
expect_error 2 "--keep-casts with --offload optimizer: the host optimizer writes the weights" \
  "$LT" train --keep-casts --precision bf16-mixed --offload optimizer
expect_error 2 "--keep-casts with --strategy fsdp" "$LT" train --keep-casts --precision bf16-mixed --strategy fsdp --devices 2
finish
