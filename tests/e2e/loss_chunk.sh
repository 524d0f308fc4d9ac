# --loss-chunk N: the causal LMs' head and loss run N token rows at a time (linear_cross_entropy),
# so the [tokens, vocabulary] logits never exist. The losses equal the unchunked run's (gpt2-tiny,
# llama-tiny, an untied head, masked prompt tokens), plan == measured on the CPU, the planned
# gpt2-124m peak drops by about the logits' size, and the refusals are one line each.
source "$(dirname "$0")/common.bash" "$@"
T=(timeout 300)
losses() { grep '"loss"' "$1" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }
# same_losses A B: every step's loss within 1e-5 relative (f32 sums in another order).
same_losses() {
  if python3 - "$1" "$2" <<'PY'; then ok; else fail "$3: losses differ with --loss-chunk"; fi
import json, sys
a = [json.loads(s)["loss"] for s in open(sys.argv[1]) if '"loss"' in s]
b = [json.loads(s)["loss"] for s in open(sys.argv[2]) if '"loss"' in s]
assert len(a) == len(b) > 0, (a, b)
for x, y in zip(a, b):
    assert abs(x - y) <= 1e-5 * abs(y), (a, b)
PY
}
G=(--data synthetic --seq-len 32 --batch 4 --steps 4 --eval-batches 1 --device cpu --lr 1e-2)

# gpt2-tiny (tied head: the table's gradient adds the head's to the embedding's), 13-row chunks
# (128 rows per micro-batch: a short last chunk).
expect_ok "${T[@]}" "$LT" train --model gpt2-tiny "${G[@]}" --metrics "$WORK/g0.jsonl"
expect_ok "${T[@]}" "$LT" train --model gpt2-tiny "${G[@]}" --loss-chunk 13 --metrics "$WORK/g1.jsonl"
same_losses "$WORK/g0.jsonl" "$WORK/g1.jsonl" "gpt2-tiny"
# bf16-mixed: the logits are bf16, the lse f32, per row as the unchunked path computes them.
expect_ok "${T[@]}" "$LT" train --model gpt2-tiny "${G[@]}" --precision bf16-mixed --metrics "$WORK/b0.jsonl"
expect_ok "${T[@]}" "$LT" train --model gpt2-tiny "${G[@]}" --precision bf16-mixed --loss-chunk 20 --metrics "$WORK/b1.jsonl"
if python3 - "$WORK/b0.jsonl" "$WORK/b1.jsonl" <<'PY'; then ok; else fail "bf16-mixed: losses differ with --loss-chunk"; fi
import json, sys
a = [json.loads(s)["loss"] for s in open(sys.argv[1]) if '"loss"' in s]
b = [json.loads(s)["loss"] for s in open(sys.argv[2]) if '"loss"' in s]
assert len(a) == len(b) == 4 and a[0] == b[0], (a, b)  # step 1: the same forward
assert all(abs(x - y) <= 2e-3 * abs(y) for x, y in zip(a, b)), (a, b)  # dW rounds per chunk in bf16
PY

# llama-tiny (tied) and a LLaMA config with an untied lm_head.
expect_ok "${T[@]}" "$LT" train --model llama-tiny "${G[@]}" --metrics "$WORK/l0.jsonl"
expect_ok "${T[@]}" "$LT" train --model llama-tiny "${G[@]}" --loss-chunk 7 --metrics "$WORK/l1.jsonl"
same_losses "$WORK/l0.jsonl" "$WORK/l1.jsonl" "llama-tiny"
# The run's evaluation goes through the chunked head too: the same validation loss.
if python3 - "$WORK/l0.jsonl" "$WORK/l1.jsonl" <<'PY'; then ok; else fail "llama-tiny: eval_loss differs with --loss-chunk"; fi
import json, sys
a = [json.loads(s)["eval_loss"] for s in open(sys.argv[1]) if '"eval_loss"' in s]
b = [json.loads(s)["eval_loss"] for s in open(sys.argv[2]) if '"eval_loss"' in s]
assert len(a) == len(b) > 0 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b)), (a, b)
PY
# A long context: without the chunked evaluation the final evaluation's [T, V] logits were the
# peak (its phase is named in the plan); with it the peak is training's.
expect_ok "${T[@]}" "$LT" plan --model llama-tiny --data synthetic --batch 1 --seq-len 1024 --checkpoint blocks --loss-chunk 64
expect_grep "peak reached during: step" "$WORK/out" "the long-context plan's peak"
cat >"$WORK/untied.json" <<'JSON'
{"model_type": "llama", "vocab_size": 1000, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "tie_word_embeddings": false}
JSON
expect_ok "${T[@]}" "$LT" train --config "$WORK/untied.json" "${G[@]}" --metrics "$WORK/u0.jsonl"
expect_ok "${T[@]}" "$LT" train --config "$WORK/untied.json" "${G[@]}" --loss-chunk 50 --metrics "$WORK/u1.jsonl"
same_losses "$WORK/u0.jsonl" "$WORK/u1.jsonl" "untied lm_head"

# Prompt/response pairs: the prompt's targets are -100, masked in the chunked loss as before
# (chunks of 5 rows: some hold only prompt tokens).
for i in $(seq 1 40); do echo "{\"prompt\": \"question number $i?\", \"response\": \"the answer is $i\"}"; done >"$WORK/qa.jsonl"
M=(--model gpt2-tiny --data "$WORK/qa.jsonl" --seq-len 32 --batch 4 --steps 4 --eval-batches 1 --device cpu --lr 1e-2)
expect_ok "${T[@]}" "$LT" train "${M[@]}" --metrics "$WORK/m0.jsonl"
expect_ok "${T[@]}" "$LT" train "${M[@]}" --loss-chunk 5 --metrics "$WORK/m1.jsonl"
same_losses "$WORK/m0.jsonl" "$WORK/m1.jsonl" "prompt/response"

# plan == measured on the CPU, with the chunked loss.
P=(--model gpt2-tiny --data synthetic --batch 4 --seq-len 32 --steps 2 --eval-batches 1 --loss-chunk 13)
expect_ok "${T[@]}" "$LT" plan "${P[@]}" --device-type cpu --json
cp "$WORK/out" "$WORK/plan.json"
expect_ok "${T[@]}" "$LT" train "${P[@]}" --device cpu --metrics-json "$WORK/run.json"
if python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY'; then ok; else fail "--loss-chunk: plan != measured"; fi
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert plan["peak_allocated_bytes"] == run["peak_allocated_bytes"], (plan["peak_allocated_bytes"], run["peak_allocated_bytes"])
PY

# gpt2-124m, bf16-mixed, B16 x T1024 on CUDA (planned): the peak drops by about the bf16 logits
# (16384 rows of 50264: 1.65 GB), less the 1024-row chunk the loss keeps.
Q=(--model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --steps 1 --eval-batches 1 --precision bf16-mixed --device cuda --json)
expect_ok "${T[@]}" "$LT" plan "${Q[@]}"
cp "$WORK/out" "$WORK/p0.json"
expect_ok "${T[@]}" "$LT" plan "${Q[@]}" --loss-chunk 1024
if python3 - "$WORK/p0.json" "$WORK/out" <<'PY'; then ok; else fail "gpt2-124m: the planned peak does not drop by the logits"; fi
import json, sys
a, b = (json.load(open(p))["peak_allocated_bytes"] for p in sys.argv[1:])
logits = 16 * 1024 * 50264 * 2
print("gpt2-124m planned peak", a, "->", b, "saved", a - b)
assert 0.8 * logits <= a - b <= 1.3 * logits, (a, b, a - b, logits)
PY

# Refusals.
expect_error 2 "--loss-chunk" "$LT" train --model gpt2-tiny "${G[@]}" --loss-chunk -1
expect_error 2 "--loss-chunk 8: model vit-tiny is a classifier" "$LT" train --model vit-tiny --data synthetic --batch 4 --steps 1 --device cpu --loss-chunk 8
expect_error 2 "--loss-chunk 8: model vit-tiny is a classifier" "$LT" plan --model vit-tiny --data synthetic --batch 4 --loss-chunk 8
finish
