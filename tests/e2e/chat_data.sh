# Conversations and packing (issue 48): a .jsonl of {"messages": [...]} lines trains through a
# tokenizer directory's chat template (tests/data/tokenizers/qwen2's tokenizer.json, which has
# <|im_start|> and <|im_end|>, beside the real Qwen3 tokenizer_config.json) and through a
# --chat-template override; the loss is on the assistant's turns (a constant reply is learnt, the
# random user text is not); generate --chat answers and stops at the end of the turn; resume keeps
# the template; plan == measured on the CPU for packed rows; every bad input is one line.
source "$(dirname "$0")/common.bash" "$@"
DATA=$(cd "$(dirname "$0")/../data" && pwd)

mkdir "$WORK/tok"
cp "$DATA/tokenizers/qwen2/tokenizer.json" "$WORK/tok/"
cp "$DATA/chat_templates/qwen3/tokenizer_config.json" "$WORK/tok/"
cat >"$WORK/model.json" <<'JSON'
{"model_type": "qwen3", "vocab_size": 4096, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 256,
 "tie_word_embeddings": true}
JSON
# Conversations of skewed lengths: random words from the user (some with a system message, some
# two turns), and always the same reply.
python3 - "$WORK/chat.jsonl" <<'PY'
import json, random, sys
random.seed(4)
words = "apple river stone cloud seven orange quiet table window green market silver".split()
with open(sys.argv[1], "w") as f:
    for i in range(160):
        say = lambda: " ".join(random.choice(words) for _ in range(random.choice([2, 3, 5, 8, 14])))
        m = []
        if i % 4 == 0:
            m.append({"role": "system", "content": "Answer briefly."})
        m += [{"role": "user", "content": say()}, {"role": "assistant", "content": "OK."}]
        if i % 3 == 0:
            m += [{"role": "user", "content": say()}, {"role": "assistant", "content": "OK."}]
        f.write(json.dumps({"messages": m}) + "\n")
PY
cat >"$WORK/chatml.jinja" <<'JINJA'
{%- for m in messages %}
{%- if m['role'] not in ['system', 'user', 'assistant'] %}{{ raise_exception('Unknown role: ' ~ m['role']) }}{% endif %}
{{- '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
JINJA
BASE=("$LT" train --config "$WORK/model.json" --seq-len 64 --batch 8 --lr 1e-2 --warmup 0 --device cpu --eval-batches 2)
RUN=("${BASE[@]}" --tokenizer "$WORK/tok" --data "$WORK/chat.jsonl")
BAD=("${BASE[@]}" --tokenizer "$WORK/tok" --data "$WORK/bad.jsonl" --steps 1)

# The directory's template (Qwen3's): packed rows by default.
expect_ok "${RUN[@]}" --steps 2 || { finish; exit 1; }
expect_grep "data .*chat.jsonl: 160 documents, [0-9]+ train / [0-9]+ validation tokens, 144 training documents in [0-9]+ rows \(packed, each attending to itself; text fills [0-9.]+%\)" "$WORK/out"
# The loss is on the assistant's tokens only: fewer than all of them.
python3 - "$WORK/out" <<'PY' || fail "the description does not say how many tokens carry the loss"
import re, sys
m = re.search(r"the loss on ([0-9]+) of the ([0-9]+) training tokens \(--train-on assistant\)", open(sys.argv[1]).read())
assert m and 0 < int(m.group(1)) < int(m.group(2)) / 2, m and m.groups()
PY
# --packing none: one conversation a row.
expect_ok "${RUN[@]}" --steps 1 --packing none
expect_grep "144 training documents in [0-9]+ rows \(one a row" "$WORK/out"
expect_ok "${RUN[@]}" --steps 1 --packing concat
expect_grep "[0-9]+ windows \(documents concatenated, attending across\)" "$WORK/out"

# The override: a ChatML template without think blocks. The assistant's constant reply is learnt
# when only it carries the loss; with --train-on all the random user words keep the loss high.
loss_of() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["eval_loss"])' "$1"; }
expect_ok "${RUN[@]}" --chat-template "$WORK/chatml.jinja" --steps 60 --save "$WORK/chat" --metrics "$WORK/a.jsonl" \
  || { finish; exit 1; }
expect_ok "${RUN[@]}" --chat-template "$WORK/chatml.jinja" --steps 60 --train-on all --metrics "$WORK/b.jsonl"
if grep -q "the loss on" "$WORK/out"; then fail "--train-on all still masks tokens"; else ok; fi
a=$(loss_of "$WORK/a.jsonl")
b=$(loss_of "$WORK/b.jsonl")
if python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if a < 0.3 and b > 4 * a else 1)" "$a" "$b"; then
  ok
else
  fail "the assistant-only held-out loss $a should be near 0 and the all-token one $b far above it"
fi
if [ -s "$WORK/chat/chat_template.jinja" ] && cmp -s "$WORK/chat/chat_template.jinja" "$WORK/chatml.jinja"; then ok; else
  fail "the checkpoint does not hold the --chat-template as chat_template.jinja"
fi

# generate --chat: the reply alone, ended by the template's <|im_end|>.
expect_ok "$LT" generate --checkpoint "$WORK/chat" --chat --prompt "seven green apple" --temperature 0 --max-new-tokens 20
if [ "$(cat "$WORK/out")" = "OK." ]; then ok; else fail "generate --chat printed '$(cat "$WORK/out")', want 'OK.'"; fi
echo '[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "river stone"}]' >"$WORK/conv.json"
expect_ok "$LT" generate --checkpoint "$WORK/chat" --messages "$WORK/conv.json" --temperature 0 --max-new-tokens 20
if [ "$(cat "$WORK/out")" = "OK." ]; then ok; else fail "generate --messages printed '$(cat "$WORK/out")', want 'OK.'"; fi
expect_error 2 "--chat without a message: --prompt is the user's message, and it is empty" \
  "$LT" generate --checkpoint "$WORK/chat" --chat
echo '{"messages": [{"role": "user"}], "x": 1' >"$WORK/badconv.json"
expect_error 1 "badconv.json: not valid JSON" "$LT" generate --checkpoint "$WORK/chat" --messages "$WORK/badconv.json"
# A checkpoint whose tokenizer has no chat template: --chat is refused before any weight is read.
for i in $(seq 1 200); do echo "{\"text\": \"plain text number $i\"}"; done >"$WORK/text.jsonl"
expect_ok "${BASE[@]}" --steps 1 --tokenizer "$DATA/tokenizers/qwen2" --data "$WORK/text.jsonl" --save "$WORK/plain"
expect_error 1 "cannot generate from .*plain: chat template: .*there is no chat_template" \
  "$LT" generate --checkpoint "$WORK/plain" --chat --prompt "hi"

# Resume reads the checkpoint's template; another one is refused.
expect_ok "$LT" train --resume "$WORK/chat" --steps 62
expect_grep "resumed from .*chat at step 60" "$WORK/out"
expect_error 2 "--chat-template .*qwen3/tokenizer_config.json with --resume .*: the checkpoint trained with another template" \
  "$LT" train --resume "$WORK/chat" --steps 64 --chat-template "$DATA/chat_templates/qwen3/tokenizer_config.json"

# plan == measured on the CPU for packed conversations (document positions in every batch).
P=(--config "$WORK/model.json" --tokenizer "$WORK/tok" --data "$WORK/chat.jsonl" --seq-len 64 --batch 8 --steps 2
  --eval-batches 1 --workers 1)
expect_ok "$LT" plan "${P[@]}" --device-type cpu --json
cp "$WORK/out" "$WORK/plan.json"
expect_ok "$LT" train "${P[@]}" --device cpu --metrics-json "$WORK/run.json"
if python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY'; then ok; else fail "packed conversations: plan != measured"; fi
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert plan["peak_allocated_bytes"] == run["peak_allocated_bytes"], (plan["peak_allocated_bytes"], run["peak_allocated_bytes"])
PY

# Bad inputs: one line each.
head -2 "$WORK/chat.jsonl" >"$WORK/bad.jsonl"
echo '{"text": "not a conversation"}' >>"$WORK/bad.jsonl"
expect_error 1 "chat data .*bad.jsonl:3: the line has no \"messages\"" "${BAD[@]}"
head -2 "$WORK/chat.jsonl" >"$WORK/bad.jsonl"
echo '{"messages": [{"role": "bot", "content": "beep"}, {"role": "assistant", "content": "OK."}]}' >>"$WORK/bad.jsonl"
expect_error 1 "chat data .*bad.jsonl:3: .*Unknown role: bot" "${BAD[@]}" \
  --chat-template "$WORK/chatml.jinja"
echo '{"messages": [{"role": "user", "content": "hi"}]}' >"$WORK/bad.jsonl"
expect_error 1 "bad.jsonl:1: the conversation has no assistant message" "${BAD[@]}"
echo '{"messages": "hi"}' >"$WORK/bad.jsonl"
expect_error 1 "bad.jsonl:1: \"messages\" is not a non-empty list" "${BAD[@]}"
echo '{"text": "a text first"}' >"$WORK/bad.jsonl"
head -1 "$WORK/chat.jsonl" >>"$WORK/bad.jsonl"
expect_error 1 "bad.jsonl:2: it has \"messages\" \(a conversation\), and the file's first line is a text" \
  "${BAD[@]}"
expect_error 2 "--train-on prompt: the choices are assistant or all" "${RUN[@]}" --steps 1 --train-on prompt
expect_error 2 "--packing pad: the choices are none, docs or concat" "${RUN[@]}" --steps 1 --packing pad
expect_error 2 "--packing none with model vit-tiny: it is an image classifier" \
  "$LT" train --model vit-tiny --data synthetic --steps 1 --packing none --device cpu
# No template: the test tokenizer's own directory has none; the byte tokenizer has no files.
expect_error 1 "tokenizer_config.json: there is no chat_template" \
  "${BASE[@]}" --steps 1 --data "$WORK/chat.jsonl" --tokenizer "$DATA/tokenizers/qwen2"
expect_error 1 "chat template of the bytes tokenizer: it has no tokenizer_config.json" \
  "$LT" train --model gpt2-tiny --data "$WORK/chat.jsonl" --steps 1 --batch 4 --seq-len 32 --device cpu
expect_error 2 "--chat-template .*chatml.jinja: the run reads the byte tokenizer" \
  "$LT" train --model gpt2-tiny --data "$WORK/chat.jsonl" --steps 1 --batch 4 --seq-len 32 --device cpu \
  --chat-template "$WORK/chatml.jinja"
expect_error 1 "cannot read|not found|no such file" "${RUN[@]}" --steps 1 --chat-template "$WORK/none.jinja"
echo '{% if %}' >"$WORK/broken.jinja"
expect_error 1 "broken.jinja.*line 1" "${RUN[@]}" --steps 1 --chat-template "$WORK/broken.jinja"
finish
