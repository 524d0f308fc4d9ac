# Training and generating with a tokenizer.json (tests/data/tokenizers): the run names it, the
# checkpoint keeps a copy that --resume and generate use (the original may be gone), a different
# --tokenizer on resume and a tokenizer larger than the model are refused in one line, a model
# directory's tokenizer.json is the default, invalid UTF-8 text trains, and a damaged or missing
# tokenizer file is one line.
source "$(dirname "$0")/common.bash" "$@"
TOK=$(cd "$(dirname "$0")/../data/tokenizers" && pwd)
echo '{"model_type": "gpt2", "vocab_size": 4096, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2}' >"$WORK/g.json"
for i in $(seq 1 150); do
  echo "{\"prompt\": \"Q: what is $i plus $i?\\n\", \"response\": \"A: $((i + i)), caf\u00e9 \u65e5\u672c.\"}"
done >"$WORK/sft.jsonl"
RUN=("$LT" train --config "$WORK/g.json" --batch 8 --seq-len 32 --lr 3e-3 --device cpu --eval-batches 2)

expect_error 2 "the tokenizer has 4096 ids: model gpt2-tiny embeds only 256 \(pass a tokenizer with at most 256 ids, or a model whose vocab_size is at least 4096\)" \
  "$LT" train --model gpt2-tiny --tokenizer "$TOK/gpt2" --steps 1 --device cpu

# A copy of the tokenizer directory that is deleted after the run: the checkpoint's copy serves.
cp -r "$TOK/sentencepiece" "$WORK/sp"
expect_ok "${RUN[@]}" --tokenizer "$WORK/sp" --data "$WORK/sft.jsonl" --steps 6 --stop-at 2 --save "$WORK/ck" || { finish; exit 1; }
expect_grep "tokenizer bpe-sentencepiece \(vocab 4096, $WORK/sp/tokenizer.json\); data .*sft.jsonl: 150 documents" "$WORK/out"
for f in tokenizer.json tokenizer_config.json; do
  if cmp -s "$TOK/sentencepiece/$f" "$WORK/ck/$f"; then ok; else fail "the checkpoint's $f differs from the run's"; fi
done
rm -r "$WORK/sp"
expect_ok "$LT" train --resume "$WORK/ck" --stop-at 4
expect_grep "resumed from .*ck at step 2" "$WORK/out"
expect_grep "tokenizer bpe-sentencepiece \(vocab 4096, $WORK/ck/tokenizer.json\)" "$WORK/out"
expect_error 2 "--tokenizer $TOK/gpt2 with --resume $WORK/ck: the checkpoint was trained with another tokenizer" \
  "$LT" train --resume "$WORK/ck" --tokenizer "$TOK/gpt2"
expect_ok "$LT" train --resume "$WORK/ck" --tokenizer "$TOK/sentencepiece/tokenizer.json"
expect_grep "resumed from .*ck at step 4" "$WORK/out"

# generate: the prompt, then decoded text (valid UTF-8: pieces are whole characters).
expect_ok "$LT" generate --checkpoint "$WORK/ck" --prompt "Q: what is 7 plus 7?" --max-new-tokens 30 --temperature 0.8 --top-k 20
if [ "$(head -c 20 "$WORK/out")" = "Q: what is 7 plus 7?" ]; then ok; else fail "output does not start with the prompt"; cat "$WORK/out" >&2; fi
if iconv -f UTF-8 -t UTF-8 "$WORK/out" >/dev/null 2>&1; then ok; else fail "generate printed invalid UTF-8"; od -c "$WORK/out" | head >&2; fi
if [ "$(wc -c <"$WORK/out")" -gt 22 ]; then ok; else fail "no text was generated"; cat "$WORK/out" >&2; fi
expect_ok "$LT" generate --checkpoint "$WORK/ck" --max-new-tokens 5  # empty prompt: starts after BOS
rm "$WORK/ck/tokenizer.json"
expect_error 1 "checkpoint $WORK/ck has no tokenizer.json: it was trained with a 'bpe-sentencepiece' tokenizer" \
  "$LT" generate --checkpoint "$WORK/ck"

# A byte-level run's checkpoint with a tokenizer.json copied in: refused, as trainer_state.json
# names the tokenizer the run read (issue 47). Without that record, the tokenizer has more ids
# than the model embeds: refused as a damaged checkpoint.
expect_ok "$LT" train --model gpt2-tiny --dim 32 --depth 2 --heads 2 --steps 1 --batch 4 --seq-len 16 --device cpu \
  --data "$WORK/sft.jsonl" --save "$WORK/bytes"
cp "$TOK/gpt2/tokenizer.json" "$WORK/bytes/"
expect_error 1 "checkpoint $WORK/bytes: its tokenizer.json is a 'bpe-bytelevel' tokenizer: trainer_state.json says the run used 'bytes'" \
  "$LT" generate --checkpoint "$WORK/bytes"
python3 -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); del d['tokenizer']; json.dump(d, open(p, 'w'))" "$WORK/bytes/trainer_state.json"
expect_error 1 "cannot generate from $WORK/bytes: its tokenizer has 4096 ids and its model embeds only 256" \
  "$LT" generate --checkpoint "$WORK/bytes"

# A model directory (config.json, weights) with a tokenizer.json: the default; --tokenizer overrides it.
expect_ok "$LT" train --config "$WORK/g.json" --data fortunes --steps 1 --batch 4 --seq-len 16 --device cpu --save "$WORK/weights"
mkdir "$WORK/model"
cp "$WORK/weights/config.json" "$WORK/weights/model.safetensors" "$WORK/model/"
cp "$TOK/gpt2/tokenizer.json" "$TOK/gpt2/tokenizer_config.json" "$WORK/model/"
printf 'caf\xc3\xa9 \xff\xfe broken \xc3 bytes, then text again.\n%.0s' $(seq 1 100) >"$WORK/bad-utf8.txt"
expect_ok "$LT" train --model "$WORK/model" --data "$WORK/bad-utf8.txt" --steps 2 --batch 4 --seq-len 16 --device cpu
expect_grep "tokenizer bpe-bytelevel \(vocab 4096, $WORK/model/tokenizer.json\)" "$WORK/out"
expect_ok "$LT" train --model "$WORK/model" --tokenizer "$TOK/llama3" --data "$WORK/bad-utf8.txt" --steps 2 --batch 4 --seq-len 16 --device cpu
expect_grep "tokenizer bpe-bytelevel \(vocab 4096, $TOK/llama3/tokenizer.json\)" "$WORK/out"

# A tokenizer.json that is not one.
echo '{"model": ' >"$WORK/broken.json"
expect_error 1 "broken.json" "${RUN[@]}" --tokenizer "$WORK/broken.json" --data "$WORK/sft.jsonl" --steps 1
finish
