# Model configs the registry must refuse in one line, at once: no model_type, sizes whose
# arithmetic overflows (n_inner, image_size, patch_size), zero and negative sizes, models larger
# than any machine (--depth 100000000, n_layer 10^9), in --config and in a checkpoint's
# config.json read by generate and train --resume. And tie_word_embeddings: false is honoured
# (a separate lm_head.weight), not ignored. Every command runs under `timeout 20`: a hang fails.
source "$(dirname "$0")/common.bash" "$@"
T=(timeout 20)
SYN=(--data synthetic --batch 2 --steps 2)

# cfg NAME JSON: writes $WORK/NAME.json.
cfg() { echo "$2" >"$WORK/$1.json"; }
GPT='"vocab_size": 256, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2'
VIT='"num_channels": 1, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64'

# No model_type, or an unknown one: the family is never guessed from the keys.
cfg no-type "{$GPT}"
cfg t5 '{"model_type": "t5", "hidden_size": 32}'
for cmd in train plan; do
  expect_error 1 "config.json has no \"model_type\": .*known model types are gpt2, vit" "${T[@]}" "$LT" $cmd --config "$WORK/no-type.json" "${SYN[@]}"
  expect_error 1 "unknown model_type 't5': the known model types are gpt2, vit" "${T[@]}" "$LT" $cmd --config "$WORK/t5.json" "${SYN[@]}"
done

# Sizes whose products overflow int64, and models over 2^48 parameters: the figure is named.
cfg inner "{\"model_type\": \"gpt2\", $GPT, \"n_inner\": 4611686018427387904}"
cfg inner-max "{\"model_type\": \"gpt2\", $GPT, \"n_inner\": 9223372036854775807}"
cfg image "{\"model_type\": \"vit\", $VIT, \"image_size\": 4611686018427387904, \"patch_size\": 1}"
cfg patch "{\"model_type\": \"vit\", $VIT, \"image_size\": 2147483648, \"patch_size\": 2147483648}"
for cmd in train plan; do
  for c in inner inner-max; do
    expect_error 1 "GPT-2 model has [0-9.e]+ parameters = [0-9.e]+ bytes in f32: .*2\^48" "${T[@]}" "$LT" $cmd --config "$WORK/$c.json" "${SYN[@]}"
  done
  for c in image patch; do
    expect_error 1 "ViT model has [0-9.e]+ parameters" "${T[@]}" "$LT" $cmd --config "$WORK/$c.json" "${SYN[@]}"
  done
done

# Zero (a division), negative and non-dividing sizes.
cfg patch0 "{\"model_type\": \"vit\", $VIT, \"image_size\": 28, \"patch_size\": 0}"
cfg head0 "{\"model_type\": \"gpt2\", \"n_embd\": 32, \"n_head\": 0}"
cfg head3 "{\"model_type\": \"gpt2\", \"n_embd\": 32, \"n_head\": 3}"
cfg neg "{\"model_type\": \"gpt2\", $GPT, \"n_layer\": -4}"
expect_error 1 "patch_size = 0: it must be positive" "${T[@]}" "$LT" plan --config "$WORK/patch0.json" "${SYN[@]}"
expect_error 1 "n_head = 0: it must be positive" "${T[@]}" "$LT" plan --config "$WORK/head0.json" "${SYN[@]}"
expect_error 1 "n_embd 32: is not divisible by n_head 3" "${T[@]}" "$LT" plan --config "$WORK/head3.json" "${SYN[@]}"
expect_error 1 "n_layer = -4: it must be positive" "${T[@]}" "$LT" train --config "$WORK/neg.json" "${SYN[@]}"

# --depth 100000000: refused by the flag's range (or the closed form), before anything is built (well within 3 s).
for cmd in train plan; do
  start=$(date +%s%N)
  expect_error 2 "(--depth 100000000 is out of range|GPT-2 model has 100000000 layers \(n_layer\) and [0-9.e]+ parameters: leantrain builds at most 10000)" \
    "${T[@]}" "$LT" $cmd --model gpt2-tiny --depth 100000000 "${SYN[@]}"
  ms=$((($(date +%s%N) - start) / 1000000))
  if [ $ms -lt 3000 ]; then ok; else fail "$cmd --depth 100000000 took $ms ms"; fi
done

# A checkpoint whose config.json was edited: generate and --resume read it through the registry.
cfg gpt "{\"model_type\": \"gpt2\", $GPT}"
expect_ok "${T[@]}" "$LT" train --config "$WORK/gpt.json" "${SYN[@]}" --seq-len 16 --device cpu --save "$WORK/saved" || { finish; exit 1; }
cp -r "$WORK/saved" "$WORK/ck"  # the copies' source: a resume that wrongly ran would save over "saved"
# edit NAME KEY VALUE: a copy of the checkpoint with config.json's KEY set to VALUE (JSON).
edit() {
  rm -rf "${WORK:?}/$1" && cp -r "$WORK/ck" "$WORK/$1"
  python3 -c 'import json, sys; p = sys.argv[1]; j = json.load(open(p)); j[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(j, open(p, "w"))' \
    "$WORK/$1/config.json" "$2" "$3"
}
edit ck-inner n_inner 4611686018427387904
edit ck-layers n_layer 1000000000
for ck in ck-inner ck-layers; do
  expect_error 1 "cannot generate from .*$ck: config.json: GPT-2 model has" "${T[@]}" "$LT" generate --checkpoint "$WORK/$ck" --max-new-tokens 2
  expect_error 1 "cannot resume from .*$ck: config.json: GPT-2 model has" "${T[@]}" "$LT" train --resume "$WORK/$ck" --steps 4
done
# A valid config.json that is not the model the run builds (a different dropout).
edit ck-drop resid_pdrop 0.5
expect_error 1 "cannot resume from .*ck-drop: config.json has resid_pdrop = 0.5: this run builds resid_pdrop = 0" \
  "${T[@]}" "$LT" train --resume "$WORK/ck-drop" --steps 4

edit ck-type model_type '"vit"'
expect_error 1 "cannot resume from .*ck-type: config.json describes a ViT model: this run builds a GPT-2 model" \
  "${T[@]}" "$LT" train --resume "$WORK/ck-type" --steps 4

# tie_word_embeddings false: a separate lm_head.weight, saved, loaded by generate and --resume.
cfg untied "{\"model_type\": \"gpt2\", $GPT, \"tie_word_embeddings\": false}"
expect_ok "${T[@]}" "$LT" train --config "$WORK/untied.json" "${SYN[@]}" --seq-len 16 --device cpu --save "$WORK/untied-ck"
expect_grep '"tie_word_embeddings": false' "$WORK/untied-ck/config.json"
if python3 "$(dirname "$0")/safetensors_tool.py" check "$WORK/untied-ck/model.safetensors" >"$WORK/names"; then ok; else fail "untied model.safetensors does not parse"; fi
expect_grep "^lm_head.weight F32 \[256, 32\]" "$WORK/names" "untied model.safetensors tensors"
expect_ok "${T[@]}" "$LT" generate --checkpoint "$WORK/untied-ck" --prompt "ab" --max-new-tokens 4 --temperature 0
expect_ok "${T[@]}" "$LT" train --resume "$WORK/untied-ck" --steps 3
expect_grep "resumed from .* at step 2" "$WORK/out"
expect_ok "${T[@]}" "$LT" plan --config "$WORK/untied.json" "${SYN[@]}" --seq-len 16
finish
