# Hugging Face model directories: --save writes transformers' layout (sharded past
# --save-shard-size), --model DIR fine-tunes from one, the weights survive a load/save round trip
# bit for bit (also sharded, and cast between f32 and bf16), --resume and generate read sharded
# checkpoints, `eval` writes logits, plan predicts a loaded model like a random one, and every
# hostile directory is one line and an exit code.
source "$(dirname "$0")/common.bash" "$@"
TOOL="python3 $(dirname "$0")/safetensors_tool.py"
GPT=(--model gpt2-tiny --depth 2 --data synthetic --batch 2 --seq-len 16 --eval-batches 1 --device cpu)
# A round trip: one step at lr 0 keeps every weight as loaded, then saves them.
TRIP=(--data synthetic --batch 2 --seq-len 16 --eval-batches 1 --device cpu --steps 1 --lr 0)

expect_ok "$LT" train "${GPT[@]}" --steps 2 --save "$WORK/ck" --save-shard-size 200KB || { finish; exit 1; }
# Sharded as save_pretrained: the shards, their index, no model.safetensors; transformers' config keys.
n=$(ls "$WORK/ck" | grep -Ec '^model-[0-9]{5}-of-[0-9]{5}\.safetensors$')
if [ "$n" -ge 3 ] && [ ! -e "$WORK/ck/model.safetensors" ]; then ok; else fail "expected >= 3 shards, got $n"; ls "$WORK/ck" >&2; fi
expect_grep '"total_size": [0-9]+' "$WORK/ck/model.safetensors.index.json" "the index"
expect_grep '"transformer.wte.weight": "model-000' "$WORK/ck/model.safetensors.index.json" "the index"
expect_grep '"architectures"' "$WORK/ck/config.json" "config.json"
expect_grep '"GPT2LMHeadModel"' "$WORK/ck/config.json" "config.json"
for f in "$WORK"/ck/model-*.safetensors; do
  if $TOOL check "$f" >/dev/null; then ok; else fail "$f does not parse"; fi
done
$TOOL digest "$WORK/ck" >"$WORK/ck.digest" && ok || fail "digest of ck"

# Fine-tuning from the directory, and a round trip that is bit-identical, sharded the same way.
expect_ok "$LT" train --model "$WORK/ck" "${TRIP[@]}" --save "$WORK/trip" --save-shard-size 200KB
expect_grep "weights loaded from $WORK/ck \([0-9]+ tensors in [0-9]+ shards\)" "$WORK/out" "the run's description"
$TOOL digest "$WORK/trip" >"$WORK/trip.digest"
if diff -q "$WORK/ck.digest" "$WORK/trip.digest" >/dev/null; then ok; else fail "round trip changed the weights"; diff "$WORK/ck.digest" "$WORK/trip.digest" | head >&2; fi
if diff <(ls "$WORK/ck" | grep '^model') <(ls "$WORK/trip" | grep '^model') >/dev/null; then ok; else fail "shard files differ"; fi
# Unsharded by default (5GB), and a real fine-tune (lr > 0) from the sharded directory.
expect_ok "$LT" train --model "$WORK/ck" "${TRIP[@]}" --save "$WORK/one"
if [ -s "$WORK/one/model.safetensors" ] && [ ! -e "$WORK/one/model.safetensors.index.json" ]; then ok; else fail "default save is not one file"; fi
expect_ok "$LT" train --model "$WORK/ck" --data synthetic --batch 2 --seq-len 16 --eval-batches 1 --device cpu --steps 3 --lr 1e-3 --save "$WORK/ft"
expect_grep "final: steps 3" "$WORK/out"

# bf16 files into an f32 model (exact), f32 files into a bf16 model (rounded to nearest even).
cp -r "$WORK/ck" "$WORK/ck16" && $TOOL convert "$WORK/ck16" BF16
expect_ok "$LT" train --model "$WORK/ck16" "${TRIP[@]}" --save "$WORK/up"
cp -r "$WORK/ck16" "$WORK/ck16to32" && $TOOL convert "$WORK/ck16to32" F32
if diff -q <($TOOL digest "$WORK/up") <($TOOL digest "$WORK/ck16to32") >/dev/null; then ok; else fail "bf16 -> f32 load is not exact"; fi
expect_ok "$LT" train --model "$WORK/ck" "${TRIP[@]}" --precision bf16-true --save "$WORK/down"
if diff -q <($TOOL digest "$WORK/down") <($TOOL digest "$WORK/ck16") >/dev/null; then ok; else fail "f32 -> bf16 load does not round to nearest even"; fi

# eval: the logits of the loaded model, the same from the sharded directory and its round trip.
$TOOL ids "$WORK/ids.safetensors" 2 16 256 7
expect_ok "$LT" eval --model "$WORK/ck" --inputs "$WORK/ids.safetensors" --out "$WORK/a.safetensors" --device cpu
expect_grep "^logits \[2, 16, 256\] \| loss [0-9.]+ -> " "$WORK/out" "eval's line"
expect_ok "$LT" eval --model "$WORK/one" --inputs "$WORK/ids.safetensors" --out "$WORK/b.safetensors" --device cpu
if cmp -s "$WORK/a.safetensors" "$WORK/b.safetensors"; then ok; else fail "eval's logits differ after a round trip"; fi
$TOOL check "$WORK/a.safetensors" >"$WORK/names"
expect_grep "^logits F32 \[2, 16, 256\]" "$WORK/names" "eval's output"
expect_grep "^loss F32" "$WORK/names" "eval's output"
expect_error 1 "has no tensor 'input_ids'" "$LT" eval --model "$WORK/ck" --inputs "$WORK/ck/$(ls "$WORK/ck" | grep -m1 '^model-')"

# --resume reads a sharded checkpoint: 2 + 2 steps give the straight run's losses.
expect_ok "$LT" train "${GPT[@]}" --steps 4 --metrics "$WORK/straight.jsonl"
expect_ok "$LT" train "${GPT[@]}" --steps 4 --stop-at 2 --save "$WORK/half" --save-shard-size 100KB --metrics "$WORK/resumed.jsonl"
expect_ok "$LT" train --resume "$WORK/half"
expect_grep "resumed from $WORK/half at step 2" "$WORK/out"
if diff <(grep -o '"loss": [^,]*' "$WORK/straight.jsonl") <(grep -o '"loss": [^,]*' "$WORK/resumed.jsonl") >/dev/null; then ok; else
  fail "losses after resuming from a sharded checkpoint differ"; fi

# A run fine-tuned from a directory resumes after that directory is gone (the checkpoint has it all).
cp -r "$WORK/ck" "$WORK/src"
expect_ok "$LT" train --model "$WORK/src" --data synthetic --batch 2 --seq-len 16 --eval-batches 1 --device cpu \
  --steps 2 --stop-at 1 --save "$WORK/fromsrc"
rm -rf "$WORK/src"
expect_ok "$LT" train --resume "$WORK/fromsrc"
expect_grep "resumed from $WORK/fromsrc at step 1" "$WORK/out"

# generate from a sharded checkpoint and from a plain model directory (no trainer_state.json).
expect_ok "$LT" generate --checkpoint "$WORK/ck" --prompt "ab" --max-new-tokens 8 --temperature 0 --device cpu
cp "$WORK/out" "$WORK/gen.ck"
mkdir "$WORK/plain" && cp "$WORK"/ck/model* "$WORK/ck/config.json" "$WORK/plain/"
expect_ok "$LT" generate --checkpoint "$WORK/plain" --prompt "ab" --max-new-tokens 8 --temperature 0 --device cpu
if cmp -s "$WORK/gen.ck" "$WORK/out"; then ok; else fail "generate from the plain directory differs"; fi

# ViT: transformers' names (query/key/value split out of in_proj), loaded back from them.
expect_ok "$LT" train --data synthetic --batch 4 --steps 1 --eval-batches 1 --device cpu --save "$WORK/vit" || { finish; exit 1; }
$TOOL check "$WORK/vit/model.safetensors" >"$WORK/names"
expect_grep "^vit.encoder.layer.0.attention.attention.key.weight F32 \[64, 64\]" "$WORK/names" "ViT names"
expect_grep "^classifier.weight F32 \[10, 64\]" "$WORK/names" "ViT names"
expect_grep '"ViTForImageClassification"' "$WORK/vit/config.json" "ViT config"
expect_ok "$LT" train --model "$WORK/vit" --data synthetic --batch 4 --steps 1 --eval-batches 1 --device cpu --lr 0 --save "$WORK/vit2"
if diff -q <($TOOL digest "$WORK/vit") <($TOOL digest "$WORK/vit2") >/dev/null; then ok; else fail "ViT round trip changed the weights"; fi

# plan --model DIR predicts what a random init of the same config does.
for dt in cpu cuda; do
  expect_ok "$LT" plan --model "$WORK/ck" --data synthetic --batch 2 --seq-len 16 --device-type $dt --json
  cp "$WORK/out" "$WORK/plan-dir.json"
  expect_ok "$LT" plan --config "$WORK/ck/config.json" --data synthetic --batch 2 --seq-len 16 --device-type $dt --json
  if python3 - "$WORK/plan-dir.json" "$WORK/out" $dt <<'PY'; then ok; else fail "plan --model DIR differs from a random init ($dt)"; fi
import json, sys
a, b, dt = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
for k in ("peak_allocated_bytes", "peak_reserved_bytes", "total_needed_bytes", "categories_peak", "categories_at_peak"):
    assert a[k] == b[k], (k, a[k], b[k])
# A CUDA run stages the weights through pinned memory: two halves of the largest tensor, an
# MLP weight of 128 x 512 f32.
if dt == "cuda":
    assert a["peak_pinned_host_bytes"] == max(2 * 262144, b["peak_pinned_host_bytes"]), (a, b)
else:
    assert a["peak_pinned_host_bytes"] == b["peak_pinned_host_bytes"], (a, b)
PY
done

# ---- hostile directories: one line, an exit code, nothing trained
H=(--data synthetic --batch 2 --seq-len 16 --steps 1 --device cpu)
fresh() { rm -rf "${WORK:?}/bad" && cp -r "$WORK/ck" "$WORK/bad"; }
index_edit() {  # PY-EXPRESSION over j (the index): edits $WORK/bad's index
  python3 - "$WORK/bad/model.safetensors.index.json" "$1" <<'PY'
import json, sys
p, expr = sys.argv[1], sys.argv[2]
j = json.load(open(p))
exec(expr)
json.dump(j, open(p, "w"), indent=2)
PY
}
S1=$(ls "$WORK/ck" | grep '^model-' | sed -n 1p)
S2=$(ls "$WORK/ck" | grep '^model-' | sed -n 2p)
FIRST=$($TOOL check "$WORK/ck/$S1" | head -1 | cut -d' ' -f1)

mkdir "$WORK/noweights" && cp "$WORK/ck/config.json" "$WORK/noweights/"
expect_error 1 "--model $WORK/noweights: no weights in the directory: .*neither model.safetensors nor model.safetensors.index.json.*--config" \
  "$LT" train --model "$WORK/noweights" "${H[@]}"
expect_error 2 "--model $WORK/ck/config.json is a file: --model takes a preset .*--config" "$LT" train --model "$WORK/ck/config.json" "${H[@]}"
expect_error 2 "unknown model 'gpt5': it is neither a preset \(.*gpt2-tiny.*vit-tiny.*\) nor a model directory" "$LT" train --model gpt5 "${H[@]}"
expect_error 2 "size flags .* with --model $WORK/ck: the directory's weights fix the model's sizes" "$LT" train --model "$WORK/ck" --dim 64 "${H[@]}"
fresh; index_edit "j['weight_map']['$FIRST'] = '../$S1'"
expect_error 1 "invalid safetensors index .*: the shard '../$S1' of tensor '$FIRST' is a path" "$LT" train --model "$WORK/bad" "${H[@]}"
fresh; index_edit "j['weight_map']['$FIRST'] = '/etc/passwd'"
expect_error 1 "the shard '/etc/passwd' of tensor '$FIRST' is an absolute path" "$LT" train --model "$WORK/bad" "${H[@]}"
fresh; mv "$WORK/bad/$S2" "$WORK/outside.safetensors" && ln -s "$WORK/outside.safetensors" "$WORK/bad/$S2"
expect_error 1 "cannot load '$WORK/bad/$S2': it is a symlink to '.*outside.safetensors', outside the checkpoint directory" \
  "$LT" train --model "$WORK/bad" "${H[@]}"
fresh; rm "$WORK/bad/$S2"
expect_error 1 "inconsistent sharded checkpoint '$WORK/bad': the shard '$S2' named by model.safetensors.index.json is missing" \
  "$LT" train --model "$WORK/bad" "${H[@]}"
fresh; $TOOL truncate "$WORK/bad/$S2" 100
expect_error 1 "$S2'?: the header length [0-9]+ runs past the end of the file" "$LT" train --model "$WORK/bad" "${H[@]}"
fresh; python3 -c "
import sys; sys.path.insert(0, '$(dirname "$0")')
import safetensors_tool as st
a, _ = st.read('$WORK/bad/$S1'); b, m = st.read('$WORK/bad/$S2')
b.update(a); st.write('$WORK/bad/$S2', b, m)"
expect_error 1 "tensor '$FIRST' is in two shards" "$LT" train --model "$WORK/bad" "${H[@]}"
fresh; $TOOL drop "$WORK/bad/$S1" "$FIRST"
expect_error 1 "tensor '$FIRST' is not in shard '$S1', where the index puts it" "$LT" train --model "$WORK/bad" "${H[@]}"
# Weights that do not fit the model (one file, to edit it simply).
mkdir "$WORK/w" && cp "$WORK/one/config.json" "$WORK/one/model.safetensors" "$WORK/w/"
W=transformer.h.0.attn.c_attn.weight
wfresh() { rm -rf "${WORK:?}/bad" && cp -r "$WORK/w" "$WORK/bad"; }
wfresh; $TOOL drop "$WORK/bad/model.safetensors" $W
expect_error 1 "missing tensor '$W' in $WORK/bad/model.safetensors" "$LT" train --model "$WORK/bad" "${H[@]}"
wfresh; $TOOL drop "$WORK/bad/model.safetensors" transformer.h.1.ln_1.weight && $TOOL drop "$WORK/bad/model.safetensors" transformer.h.1.ln_1.bias
expect_error 1 "missing tensor 'transformer.h.1.ln_1.weight' \(and 1 more\)" "$LT" train --model "$WORK/bad" "${H[@]}"
wfresh; $TOOL reshape "$WORK/bad/model.safetensors" $W
expect_error 1 "shape mismatch for tensor '$W' in .*model.safetensors: the file has \[[0-9, ]+\], the model's parameter needs \[128, 384\]" \
  "$LT" train --model "$WORK/bad" "${H[@]}"
wfresh; $TOOL to-f64 "$WORK/bad/model.safetensors" $W
expect_error 1 "dtype mismatch for tensor '$W' in .*: the file has F64, the model's parameter is F32" "$LT" train --model "$WORK/bad" "${H[@]}"
wfresh; python3 -c "
import sys; sys.path.insert(0, '$(dirname "$0")')
import safetensors_tool as st
t, m = st.read('$WORK/bad/model.safetensors')
t['transformer.h.7.attn.c_attn.weight'] = t['$W']; st.write('$WORK/bad/model.safetensors', t, m)"
expect_error 1 "unexpected tensor 'transformer.h.7.attn.c_attn.weight' in .*: the model has no parameter it could fill" \
  "$LT" train --model "$WORK/bad" "${H[@]}"
# The same checks hold for generate and eval, and for plan (before anything runs).
wfresh; $TOOL drop "$WORK/bad/model.safetensors" $W
expect_error 1 "missing tensor '$W'" "$LT" plan --model "$WORK/bad" --data synthetic --seq-len 16
expect_error 1 "missing tensor '$W'" "$LT" eval --model "$WORK/bad" --inputs "$WORK/ids.safetensors"
rm -f "$WORK/bad/trainer_state.json" "$WORK/bad/LEANTRAIN_CHECKPOINT"
expect_error 1 "cannot load checkpoint $WORK/bad: missing tensor '$W'" "$LT" generate --checkpoint "$WORK/bad" --max-new-tokens 2
# A ViT directory whose images are not the data's.
expect_error 2 "--data .*fashion-mnist does not fit the model in $WORK/v32: the model reads 32x32x1 images into 10 classes, the data has 28x28x1" \
  bash -c "printf '%s' '{\"model_type\": \"vit\", \"image_size\": 32, \"patch_size\": 8, \"num_channels\": 1, \"hidden_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 32}' >'$WORK/v32.json' &&
    '$LT' train --config '$WORK/v32.json' --data synthetic --batch 2 --steps 1 --eval-batches 1 --device cpu --save '$WORK/v32' >/dev/null &&
    '$LT' train --model '$WORK/v32' --batch 2 --steps 1 --device cpu"
finish
