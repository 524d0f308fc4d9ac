# Text data as JSON lines and the tokenizer flags: each bad input is one line and the right exit
# code (a bad file 1, a bad flag combination 2); a short CPU run on prompt/response pairs trains,
# saves, resumes and generates; a byte-level run's checkpoint holds no tokenizer.json.
source "$(dirname "$0")/common.bash" "$@"
RUN=("$LT" train --model gpt2-tiny --steps 1 --batch 4 --seq-len 16 --device cpu)

good='{"text": "a line of text"}'
bad() { printf '%s\n%s\n' "$good" "$1" >"$WORK/bad.jsonl"; }
bad '{"text": "no end'
expect_error 1 "bad.jsonl:2: it is not JSON \(byte [0-9]+ of the line: .*\) \(write one JSON object per line" "${RUN[@]}" --data "$WORK/bad.jsonl"
bad '["text"]'
expect_error 1 "bad.jsonl:2: it is a JSON array, not an object" "${RUN[@]}" --data "$WORK/bad.jsonl"
bad '{"text": 42}'
expect_error 1 "bad.jsonl:2: field \"text\" is number, not a string" "${RUN[@]}" --data "$WORK/bad.jsonl"
bad '{"prompt": "only a prompt"}'
expect_error 1 "bad.jsonl:2: it has \"prompt\" but no \"response\"" "${RUN[@]}" --data "$WORK/bad.jsonl"
bad '{"question": "q", "answer": "a"}'
expect_error 1 "bad.jsonl:2: it has no \"text\" field and no \"prompt\"/\"response\" fields" "${RUN[@]}" --data "$WORK/bad.jsonl"
# Other field names: --prompt-field / --response-field.
for i in $(seq 1 40); do echo "{\"question\": \"q$i\", \"answer\": \"the answer is $i\"}"; done >"$WORK/qa.jsonl"
expect_error 1 "qa.jsonl:1: it has no \"text\" field" "${RUN[@]}" --data "$WORK/qa.jsonl"
expect_ok "${RUN[@]}" --data "$WORK/qa.jsonl" --prompt-field question --response-field answer
expect_error 2 "--prompt-field 'x' --response-field 'x': they name two different .jsonl fields" \
  "${RUN[@]}" --data "$WORK/bad.jsonl" --prompt-field x --response-field x
: >"$WORK/empty.jsonl"
expect_error 1 "no text in .*empty.jsonl" "${RUN[@]}" --data "$WORK/empty.jsonl"

# --tokenizer: a missing path, a directory without tokenizer.json, an image model.
expect_error 2 "--tokenizer x: it applies to language models" "$LT" train --model vit-tiny --tokenizer x --steps 1 --device cpu
expect_error 1 "--tokenizer $WORK/none.json not found: no such file or directory" "${RUN[@]}" --tokenizer "$WORK/none.json"
mkdir "$WORK/notok"
expect_error 1 "--tokenizer $WORK/notok: the directory holds no tokenizer.json" "${RUN[@]}" --tokenizer "$WORK/notok"
# A model whose embedding is smaller than the tokenizer's vocabulary (the byte tokenizer's 256 ids).
echo '{"model_type": "gpt2", "vocab_size": 100, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2}' >"$WORK/v100.json"
expect_error 2 "the tokenizer has 256 ids: model .*v100.json embeds only 100 \(pass a tokenizer with at most 100 ids" \
  "$LT" train --config "$WORK/v100.json" --steps 1 --batch 4 --seq-len 16 --device cpu --data fortunes

# Prompt/response pairs: train, save, resume, generate.
for i in $(seq 1 200); do
  echo "{\"prompt\": \"Q: what is $i plus $i?\\n\", \"response\": \"A: $((i + i)).\"}"
done >"$WORK/sft.jsonl"
echo '{"text": "Plain documents can sit among the pairs."}' >>"$WORK/sft.jsonl"
TRAIN=("$LT" train --model gpt2-tiny --dim 32 --depth 2 --heads 2 --batch 8 --seq-len 32 --lr 3e-3 --device cpu
  --eval-batches 2 --data "$WORK/sft.jsonl")
expect_ok "${TRAIN[@]}" --steps 6 --stop-at 3 --save "$WORK/sft" || { finish; exit 1; }
expect_grep "tokenizer bytes \(vocab 256\); data .*sft.jsonl: 201 documents, [0-9]+ train / [0-9]+ validation tokens" "$WORK/out"
if [ -e "$WORK/sft/tokenizer.json" ]; then fail "a byte-level checkpoint has a tokenizer.json"; else ok; fi
expect_ok "$LT" train --resume "$WORK/sft"
expect_grep "resumed from .*sft at step 3" "$WORK/out"
expect_grep "data .*sft.jsonl: 201 documents" "$WORK/out"
expect_ok "$LT" generate --checkpoint "$WORK/sft" --prompt "Q: what is 7 plus 7?" --max-new-tokens 12 --temperature 0
if [ "$(head -c 20 "$WORK/out")" = "Q: what is 7 plus 7?" ]; then ok; else fail "output does not start with the prompt"; cat "$WORK/out" >&2; fi
# 20 prompt bytes, 12 sampled ones and the closing newline.
if [ "$(wc -c <"$WORK/out")" -eq 33 ]; then ok; else fail "want 33 bytes of output"; cat "$WORK/out" >&2; fi
finish
