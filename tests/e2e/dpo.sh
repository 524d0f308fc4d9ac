# --objective dpo through the CLI (issue 48, part 4): a tiny LLaMA trained a few steps on
# preference pairs with LoRA (the reference is the base with the adapters off) and as a full
# fine-tune (a first reference pass, saved with the checkpoint and read back by --resume), the
# variants, the metrics in the progress line, --metrics and --metrics-json, and every bad input as
# one line and a non-zero exit.
source "$(dirname "$0")/common.bash" "$@"
TOK="$(cd "$(dirname "$0")/../data/tokenizers" && pwd)/sentencepiece"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 0; }

# 30 pairs: the chosen completion names the prompt's thing and ends " yes", the rejected one does not.
python3 - "$WORK/pairs.jsonl" <<'PY'
import json, sys
things = ["red", "green", "blue", "cat", "dog", "tree", "stone", "river", "cloud", "seven"]
with open(sys.argv[1], "w") as f:
    for i in range(30):
        t, u = things[i % 10], things[(i * 3 + 1) % 10]
        f.write(json.dumps({"prompt": f"Tell me about {t}:", "chosen": f" {t} is fine, yes", "rejected": f" {u} {u} no"}) + "\n")
PY
# G: every flag but the data; F: with the pairs.
G=(--model llama-tiny --tokenizer "$TOK" --objective dpo --seq-len 24 --batch 4 --lr 1e-2 --warmup 0
   --schedule constant --device cpu --workers 1 --log-every 1)
F=("${G[@]}" --data "$WORK/pairs.jsonl")

# LoRA: the first step's policy is its reference (B = 0), so the loss is log 2 and the rewards 0.
expect_ok "$LT" train "${F[@]}" --lora-rank 4 --steps 8 --metrics "$WORK/lora.jsonl" --metrics-json "$WORK/lora.json" \
  --save "$WORK/lora-ckpt" && {
  expect_grep 'reference: the base with the adapters off' "$WORK/out" "the run's first line"
  expect_grep '27 train / 3 validation preference pairs' "$WORK/out" "the run's first line"
  expect_grep '^step +1/8 .*\| loss 0\.6931 \|.*\| rewards/chosen 0\.0000 \| rewards/rejected 0\.0000 \| rewards/accuracies 0\.0000 \| rewards/margins 0\.0000$' \
    "$WORK/out" "step 1's progress line"
  expect_grep 'eval step 8 \| validation loss [0-9.]+ \| rewards/chosen -?[0-9.]+ \| rewards/rejected -?[0-9.]+ \| rewards/accuracies [0-9.]+ \| rewards/margins -?[0-9.]+' \
    "$WORK/out" "the evaluation line"
  expect_grep '"rewards/margins": ' "$WORK/lora.jsonl"
  expect_grep '"eval_rewards/accuracies": ' "$WORK/lora.jsonl"
  expect_grep '"objective": \{"loss": [0-9.e-]+, "rewards/chosen": ' "$WORK/lora.json" "--metrics-json"
  python3 - "$WORK/lora.jsonl" <<'PY' && ok || fail "the LoRA run did not learn its pairs"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert abs(steps[0]["loss"] - 0.6931471805599453) < 1e-6, steps[0]
last = steps[-1]
assert last["loss"] < 0.6931 and last["rewards/margins"] > 0, last
PY
  [ -f "$WORK/lora-ckpt/adapter_model.safetensors" ] && [ ! -e "$WORK/lora-ckpt/dpo_reference.safetensors" ] && ok ||
    fail "a LoRA DPO checkpoint holds PEFT's adapter and no reference file"
}

# A full fine-tune: the reference pass, its file in the checkpoint, and a resume that reads it.
expect_ok "$LT" train "${F[@]}" --steps 4 --metrics "$WORK/full.jsonl" && {
  expect_grep 'reference: the starting weights, computed in a first pass' "$WORK/out"
  cp "$WORK/full.jsonl" "$WORK/full-whole.jsonl"
}
expect_ok "$LT" train "${F[@]}" --steps 4 --stop-at 2 --save "$WORK/full-ckpt" --metrics "$WORK/full-part.jsonl"
[ -f "$WORK/full-ckpt/dpo_reference.safetensors" ] && ok || fail "the full fine-tune's checkpoint has no dpo_reference.safetensors"
expect_ok "$LT" train "${F[@]}" --steps 4 --resume "$WORK/full-ckpt" --metrics "$WORK/full-part.jsonl" && {
  python3 - "$WORK/full-whole.jsonl" "$WORK/full-part.jsonl" <<'PY' && ok || fail "the resumed DPO run is not the whole run"
import json, sys
whole = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
part = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
assert len(part) == 4, part
for a, b in zip(whole, part):
    for k in ("loss", "rewards/chosen", "rewards/margins"):
        assert a[k] == b[k], (k, a, b)
PY
}
# A checkpoint without the reference file cannot continue a full fine-tune.
cp -r "$WORK/full-ckpt" "$WORK/no-ref"
rm "$WORK/no-ref/dpo_reference.safetensors"
expect_error 1 "cannot resume from .*no-ref: it has no dpo_reference.safetensors" \
  "$LT" train "${F[@]}" --steps 4 --resume "$WORK/no-ref"

# Conversational pairs (lists of messages, TRL's explicit and implicit prompt) through the
# tokenizer's chat template: here the committed tokenizer with a Zephyr-style template beside it.
mkdir -p "$WORK/chat-tok"
cp "$TOK/tokenizer.json" "$WORK/chat-tok/"
cp "$(dirname "$0")/../data/chat_templates/zephyr/tokenizer_config.json" "$WORK/chat-tok/"
python3 - "$WORK/conv.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(12):
        u = {"role": "user", "content": f"Pick {i}"}
        good, bad = {"role": "assistant", "content": f"{i} it is"}, {"role": "assistant", "content": "no"}
        row = {"prompt": [u], "chosen": [good], "rejected": [bad]} if i % 2 else {"chosen": [u, good], "rejected": [u, bad]}
        f.write(json.dumps(row) + "\n")
PY
expect_ok "$LT" train "${G[@]/$TOK/$WORK/chat-tok}" --data "$WORK/conv.jsonl" --lora-rank 4 --steps 2 &&
  expect_grep '11 train / 1 validation preference pairs' "$WORK/out"
expect_error 1 'conv\.jsonl:1: its pair is a conversation, and chat template: .*there is no chat_template' \
  "$LT" train "${G[@]}" --data "$WORK/conv.jsonl" --steps 1

# The variants and the flags of the loss, one step each.
expect_ok "$LT" train "${F[@]}" --lora-rank 4 --steps 2 --dpo-loss ipo --beta 0.5
expect_ok "$LT" train "${F[@]}" --lora-rank 4 --steps 2 --dpo-loss simpo --beta 2 --simpo-gamma 0.5 --label-smoothing 0.1 &&
  expect_grep 'reference: none \(SimPO\)' "$WORK/out"
expect_ok "$LT" train "${F[@]}" --lora-rank 4 --steps 2 --label-smoothing 0.2 --micro-batch 2
expect_ok "$LT" train "${F[@]}" --lora-rank 4 --steps 2 --loss-chunk 16 --checkpoint blocks
expect_ok "$LT" train "${F[@]}" --lora-rank 4 --steps 2 --fused-step --micro-batch 2 --checkpoint blocks --clip 1
expect_ok "$LT" train "${F[@]}" --steps 2 --precision bf16-mixed --offload optimizer
# QLoRA: the NF4 base with the adapters off is the reference; GPT-2 reads pairs with its byte tokenizer.
expect_ok "$LT" train "${F[@]}" --steps 2 --quantize nf4 --lora-rank 4 --precision bf16-true
expect_ok "$LT" train --model gpt2-tiny --data "$WORK/pairs.jsonl" --objective dpo --seq-len 48 --batch 4 --steps 2 --device cpu &&
  expect_grep 'tokenizer bytes .*27 train / 3 validation preference pairs' "$WORK/out"
# Synthetic pairs need no tokenizer (memory and speed measurements).
expect_ok "$LT" train --model llama-tiny --data synthetic --objective dpo --seq-len 16 --batch 2 --steps 2 --device cpu

# --fit searches DPO candidates (each a dry run of the DPO step): a budget below what the flags
# need picks a leaner configuration, its echoed command keeps --objective dpo, and the run fits.
S=(--model llama-tiny --data synthetic --objective dpo --seq-len 32 --batch 4 --steps 2 --eval-batches 1 --device cpu)
"$LT" plan "${S[@]}" --json >"$WORK/fit-plan.json" 2>"$WORK/err" || fail "plan of a DPO run: $(cat "$WORK/err")"
BUDGET=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["peak_allocated_bytes"] * 0.8))' "$WORK/fit-plan.json")
expect_ok "$LT" train "${S[@]}" --fit "$BUDGET" --metrics-json "$WORK/fit-run.json" && {
  expect_grep '^chosen for [0-9]+: leantrain train .*--objective dpo' "$WORK/out" "train --fit's chosen command"
  python3 - "$WORK/fit-run.json" "$BUDGET" <<'PY' && ok || fail "the run --fit chose does not fit its budget"
import json, sys
assert json.load(open(sys.argv[1]))["peak_allocated_bytes"] <= int(sys.argv[2])
PY
}

# The GPU scripts' torch-free parts: TRL's formulas and leantrain's row layout as the parity script
# writes them (bench/peers/dpo_torch.py), and the memory script's commands.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
expect_ok python3 "$ROOT/bench/peers/dpo_torch.py" --self-test
expect_ok python3 "$ROOT/bench/dpo_memory.py" --dry-run --leantrain "$LT" && expect_grep 'train --model tinyllama-1.1b .*--objective dpo --batch 4 ' "$WORK/out"

# ---- every bad input: one line, non-zero exit ----
printf '{"prompt": "a", "chosen": " b", "rejected": " c"}\n{"prompt": "a", "chosen": " b"}\n' >"$WORK/missing.jsonl"
expect_error 1 'missing\.jsonl:2: it has no "rejected" field' "$LT" train "${G[@]}" --data "$WORK/missing.jsonl" --steps 1
printf '{"prompt": "a", "chosen": "", "rejected": " c"}\n' >"$WORK/empty.jsonl"
expect_error 1 'empty\.jsonl:1: field "chosen" is empty' "$LT" train "${G[@]}" --data "$WORK/empty.jsonl" --steps 1
printf '{"prompt": "a", "response": " b"}\n' >"$WORK/sft.jsonl"
expect_error 1 'sft\.jsonl:1: it has no "chosen" and "rejected" fields: it is SFT data' \
  "$LT" train "${G[@]}" --data "$WORK/sft.jsonl" --steps 1
printf '{"prompt": "a", "chosen": [{"role": "assistant", "content": "b"}], "rejected": " c"}\n' >"$WORK/msgs.jsonl"
expect_error 1 'msgs\.jsonl:1: field "chosen" is a list of messages and another field of the pair is not' \
  "$LT" train "${G[@]}" --data "$WORK/msgs.jsonl" --steps 1
printf '{"prompt": "%s", "chosen": " b", "rejected": " c"}\n' "$(printf 'word %.0s' $(seq 40))" >"$WORK/long.jsonl"
expect_error 1 'long\.jsonl:1: its prompt is [0-9]+ tokens, and --seq-len 24 leaves no room' \
  "$LT" train "${G[@]}" --data "$WORK/long.jsonl" --steps 1
echo "plain text" >"$WORK/plain.txt"
expect_error 1 'plain\.txt is not a \.jsonl file' "$LT" train "${G[@]}" --data "$WORK/plain.txt" --steps 1
expect_error 2 '--beta 0 is out of range' "$LT" train "${F[@]}" --steps 1 --beta 0
expect_error 2 '--beta -1 is out of range' "$LT" train "${F[@]}" --steps 1 --beta -1
expect_error 2 '--beta 5000 is out of range' "$LT" train "${F[@]}" --steps 1 --beta 5000
expect_error 2 '--label-smoothing 0.7 is out of range' "$LT" train "${F[@]}" --steps 1 --label-smoothing 0.7
expect_error 2 '--label-smoothing 0.1 with --dpo-loss ipo' "$LT" train "${F[@]}" --steps 1 --dpo-loss ipo --label-smoothing 0.1
expect_error 2 '--objective rlhf: the choices are sft or dpo' "$LT" train --model llama-tiny --objective rlhf --steps 1
expect_error 2 '--dpo-loss hinge: the choices are sigmoid, ipo or simpo' "$LT" train "${F[@]}" --dpo-loss hinge --steps 1
expect_error 2 '--objective dpo with --data fortunes' "$LT" train --model llama-tiny --tokenizer "$TOK" --objective dpo --device cpu
expect_error 2 '--objective dpo with vit-tiny' "$LT" train --model vit-tiny --objective dpo --data synthetic --device cpu
expect_error 2 '--objective dpo with bert-tiny' "$LT" train --model bert-tiny --objective dpo --data synthetic --device cpu
expect_error 2 "--prompt-field 'chosen' --chosen-field 'chosen'" "$LT" train "${F[@]}" --prompt-field chosen --steps 1
# plan reads the same data and refuses the same way.
expect_error 1 'missing\.jsonl:2: it has no "rejected" field' "$LT" plan "${G[@]}" --data "$WORK/missing.jsonl" --steps 1
finish
