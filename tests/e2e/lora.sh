# LoRA (--lora-rank): adapters train and the loss falls; --save writes PEFT's adapter_config.json
# and adapter_model.safetensors (PEFT's keys, nothing of the frozen base); --resume continues the
# same loss curve; `leantrain merge` writes a model whose logits equal the base + adapter's
# (`eval --adapter`); plan predicts the run's peak to the byte; every refusal is one line.
source "$(dirname "$0")/common.bash" "$@"
TOOL="$(dirname "$0")/safetensors_tool.py"
G=(--data synthetic --seq-len 32 --eval-batches 1 --device cpu)

# A base model directory to adapt (a short run at lr 0 saves gpt2-tiny's random weights).
expect_ok "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lr 0 --save "$WORK/base"

# Training on text: the loss falls, only the adapters train.
expect_ok "$LT" train --model "$WORK/base" --data fortunes --batch 8 --seq-len 32 --eval-batches 1 --device cpu \
  --lr 3e-3 --steps 30 --lora-rank 8 --lora-alpha 16 --metrics "$WORK/fort.jsonl"
expect_grep "LoRA r 8, alpha 16 \(scaling 2\) on 16 linear layers \(c_attn, c_proj, c_fc\): 65536 trainable" "$WORK/out"
if python3 - "$WORK/fort.jsonl" <<'PY'; then ok; else fail "LoRA on fortunes: the loss did not fall"; fi
import json, sys
l = [json.loads(s)["loss"] for s in open(sys.argv[1]) if '"loss"' in s]
first, last = sum(l[:5]) / 5, sum(l[-5:]) / 5
assert last < first - 0.3, (first, last)
PY

# Save, resume: the same curve as a straight run; the checkpoint is a PEFT adapter directory.
losses() { grep '"loss"' "$1" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }
R=(--model "$WORK/base" "${G[@]}" --batch 4 --lr 1e-2 --steps 8 --lora-rank 4 --lora-dropout 0.1 --optimizer adamw8bit)
expect_ok "$LT" train "${R[@]}" --metrics "$WORK/full.jsonl"
expect_ok "$LT" train "${R[@]}" --stop-at 4 --save "$WORK/ck" --metrics "$WORK/half.jsonl"
expect_ok "$LT" train --resume "$WORK/ck"
expect_grep "resumed from .* at step 4" "$WORK/out"
losses "$WORK/full.jsonl" >"$WORK/a"
losses "$WORK/half.jsonl" >"$WORK/b"
if [ "$(wc -l <"$WORK/a")" = 8 ] && diff "$WORK/a" "$WORK/b" >/dev/null; then ok; else
  fail "LoRA: resumed losses differ from the straight run"; paste "$WORK/a" "$WORK/b" >&2; fi
for f in adapter_config.json adapter_model.safetensors optimizer.safetensors trainer_state.json; do
  if [ -s "$WORK/ck/$f" ]; then ok; else fail "LoRA checkpoint lacks $f"; fi
done
if [ ! -e "$WORK/ck/model.safetensors" ]; then ok; else fail "LoRA checkpoint holds the frozen base"; fi
if python3 - "$TOOL" "$WORK/ck" <<'PY'; then ok; else fail "adapter files are not PEFT's"; fi
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import safetensors_tool as st
d = sys.argv[2]
c = json.load(open(d + "/adapter_config.json"))
assert c["peft_type"] == "LORA" and c["r"] == 4 and c["lora_alpha"] == 8 and c["lora_dropout"] == 0.1, c
assert c["target_modules"] == ["c_attn", "c_proj", "c_fc"] and c["fan_in_fan_out"] is True, c
assert c["bias"] == "none" and c["task_type"] == "CAUSAL_LM" and c["modules_to_save"] is None, c
assert c["use_dora"] is False and c["use_rslora"] is False and c["rank_pattern"] == {}, c
t, meta = st.read(d + "/adapter_model.safetensors")
assert meta == {"format": "pt"}, meta
want = set()
for i in range(4):
    for m, (i_, o) in {"attn.c_attn": (128, 384), "attn.c_proj": (128, 128), "mlp.c_fc": (128, 512), "mlp.c_proj": (512, 128)}.items():
        p = f"base_model.model.transformer.h.{i}.{m}"
        want |= {p + ".lora_A.weight", p + ".lora_B.weight"}
        assert t[p + ".lora_A.weight"]["shape"] == [4, i_], (p, t[p + ".lora_A.weight"])
        assert t[p + ".lora_B.weight"]["shape"] == [o, 4], (p, t[p + ".lora_B.weight"])
assert set(t) == want, sorted(set(t) ^ want)
PY

# merge: W + (alpha/r) B A in the base's layout; its logits equal base + adapter's.
python3 "$TOOL" ids "$WORK/ids.safetensors" 2 16 256 1
expect_ok "$LT" merge --model "$WORK/base" --adapter "$WORK/ck" --out "$WORK/merged"
expect_grep "merged 16 LoRA layers" "$WORK/out"
expect_ok "$LT" eval --model "$WORK/base" --adapter "$WORK/ck" --inputs "$WORK/ids.safetensors" --out "$WORK/lora.safetensors"
expect_ok "$LT" eval --model "$WORK/merged" --inputs "$WORK/ids.safetensors" --out "$WORK/merged.safetensors"
expect_ok "$LT" eval --model "$WORK/base" --inputs "$WORK/ids.safetensors" --out "$WORK/base.safetensors"
if python3 - "$TOOL" "$WORK" <<'PY'; then ok; else fail "merged logits differ from the LoRA model's"; fi
import os, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import safetensors_tool as st
def logits(name):
    e = st.read(f"{sys.argv[2]}/{name}.safetensors")[0]["logits"]
    return struct.unpack(f"<{len(e['data']) // 4}f", e["data"])
lora, merged, base = logits("lora"), logits("merged"), logits("base")
assert max(abs(a - b) for a, b in zip(lora, merged)) < 1e-4
assert max(abs(a - b) for a, b in zip(lora, base)) > 1e-3  # the adapter changed the model
PY
expect_error 2 "--out $WORK/user: it is a directory that holds files but no leantrain checkpoint" \
  bash -c "mkdir -p '$WORK/user' && touch '$WORK/user/notes.txt' && '$LT' merge --model '$WORK/base' --adapter '$WORK/ck' --out '$WORK/user'"
if [ -e "$WORK/user/notes.txt" ]; then ok; else fail "merge deleted a user's file"; fi
expect_error 2 "--out $WORK/ck/: it is the --adapter directory, which the merge reads" \
  "$LT" merge --model "$WORK/base" --adapter "$WORK/ck" --out "$WORK/ck/"
expect_error 2 "--out $WORK/base: it is the --model directory" "$LT" merge --model "$WORK/base" --adapter "$WORK/ck" --out "$WORK/base"
if [ -s "$WORK/ck/adapter_model.safetensors" ]; then ok; else fail "merge replaced its adapter"; fi
expect_error 1 "adapter $WORK/nothing: no such directory" "$LT" merge --model "$WORK/base" --adapter "$WORK/nothing" --out "$WORK/m2"
expect_error 2 "--model gpt2-tiny: merge needs the base model's weights" "$LT" merge --model gpt2-tiny --adapter "$WORK/ck" --out "$WORK/m2"
expect_ok "$LT" train --model llama-tiny "${G[@]}" --batch 4 --steps 1 --lr 0 --save "$WORK/llama"
expect_error 1 "target_modules selects no module of this llama model" "$LT" merge --model "$WORK/llama" --adapter "$WORK/ck" --out "$WORK/m2"
cp -r "$WORK/ck" "$WORK/bad" && python3 "$TOOL" drop "$WORK/bad/adapter_model.safetensors" base_model.model.transformer.h.1.mlp.c_fc.lora_B.weight
expect_error 1 "adapter_model.safetensors lacks base_model.model.transformer.h.1.mlp.c_fc.lora_B.weight" \
  "$LT" merge --model "$WORK/base" --adapter "$WORK/bad" --out "$WORK/m2"
cp -r "$WORK/ck" "$WORK/bad2" && python3 "$TOOL" reshape "$WORK/bad2/adapter_model.safetensors" base_model.model.transformer.h.0.attn.c_attn.lora_A.weight
expect_error 1 "adapter $WORK/bad2: shape mismatch for parameter 'transformer.h.0.attn.c_attn.lora_A.weight': .* has \\[2, 256\\], the model has \\[4, 128\\]" \
  "$LT" eval --model "$WORK/base" --adapter "$WORK/bad2" --inputs "$WORK/ids.safetensors"
sed -i 's/"use_dora": false/"use_dora": true/' "$WORK/bad2/adapter_config.json"
expect_error 1 "\"use_dora\" is true" "$LT" merge --model "$WORK/base" --adapter "$WORK/bad2" --out "$WORK/m2"
expect_error 1 "it is a LoRA checkpoint: it holds adapters, not a model.*leantrain merge" \
  "$LT" generate --checkpoint "$WORK/ck" --max-new-tokens 2

# --lora-init starts from an adapter: step 1's loss equals the resumed run's own start.
expect_ok "$LT" eval --model "$WORK/base" --adapter "$WORK/ck" --inputs "$WORK/ids.safetensors"
expect_ok "$LT" train --model "$WORK/base" "${G[@]}" --batch 4 --steps 2 --lora-rank 4 --lora-init "$WORK/ck" --lr 0
expect_grep "adapters from $WORK/ck" "$WORK/out"
expect_error 2 "--lora-init $WORK/ck: its adapter has r 4, alpha 8, this run --lora-rank 8" \
  "$LT" train --model "$WORK/base" "${G[@]}" --batch 4 --steps 2 --lora-rank 8 --lora-init "$WORK/ck"

# Every precision, accumulation, checkpointing, the fused step and lean optimizers run.
for extra in "--precision bf16-mixed --checkpoint blocks" "--precision bf16-true --fused-step" \
             "--precision 16-mixed --micro-batch 2" "--optimizer lion8bit --precision bf16-true --master-weights fp32"; do
  # shellcheck disable=SC2086
  expect_ok "$LT" train --model llama-tiny "${G[@]}" --batch 4 --lr 1e-2 --steps 2 --lora-rank 4 $extra
done
# The ViT: its head trains whole (modules_to_save) and is saved in the adapter file; resume is exact.
V=(--model vit-tiny --data synthetic --batch 4 --steps 4 --eval-batches 1 --device cpu --lora-rank 4 --lr 1e-2)
expect_ok "$LT" train "${V[@]}" --metrics "$WORK/vfull.jsonl"
expect_ok "$LT" train "${V[@]}" --stop-at 2 --save "$WORK/vit" --metrics "$WORK/vhalf.jsonl"
expect_grep '"modules_to_save": \[' "$WORK/vit/adapter_config.json"
expect_grep '"classifier"' "$WORK/vit/adapter_config.json"
# PEFT on transformers 5 matches a ViT's adapters by its module names there (vit.layers.N.attention.o_proj,
# mlp.fc1, mlp.fc2), not by the checkpoint's legacy ones.
if python3 - "$TOOL" "$WORK/vit" <<'PY'; then ok; else fail "the ViT adapter does not use transformers 5's names"; fi
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import safetensors_tool as st
c = json.load(open(sys.argv[2] + "/adapter_config.json"))
assert c["target_modules"] == ["o_proj", "fc1", "fc2"] and c["modules_to_save"] == ["classifier"], c
t, _ = st.read(sys.argv[2] + "/adapter_model.safetensors")
want = {"base_model.model.classifier.weight", "base_model.model.classifier.bias"}
for i in range(4):
    for m in ("attention.o_proj", "mlp.fc1", "mlp.fc2"):
        want |= {f"base_model.model.vit.layers.{i}.{m}.lora_{ab}.weight" for ab in "AB"}
assert set(t) == want, sorted(set(t) ^ want)
PY
if python3 "$TOOL" check "$WORK/vit/adapter_model.safetensors" | grep -q "^base_model.model.classifier.weight F32"; then ok; else
  fail "the ViT adapter lacks its head"; fi
expect_ok "$LT" train --resume "$WORK/vit"
losses "$WORK/vfull.jsonl" >"$WORK/a"
losses "$WORK/vhalf.jsonl" >"$WORK/b"
if [ "$(wc -l <"$WORK/a")" = 4 ] && diff "$WORK/a" "$WORK/b" >/dev/null; then ok; else
  fail "ViT LoRA: resumed losses differ from the straight run"; paste "$WORK/a" "$WORK/b" >&2; fi

# An adapter under transformers 4's ViT names (what PEFT on transformers 4, and leantrain until now,
# wrote: target_modules ["dense"], vit.encoder.layer.N.attention.output.dense, intermediate.dense,
# output.dense) still loads: eval and merge give results identical to the transformers 5 named one.
VB=(--data synthetic --batch 4 --eval-batches 1 --device cpu)
expect_ok "$LT" train --model vit-tiny "${VB[@]}" --steps 1 --lr 0 --save "$WORK/vitbase"
expect_ok "$LT" train --model "$WORK/vitbase" "${VB[@]}" --steps 2 --lr 1e-2 --lora-rank 4 --save "$WORK/vitlora"
cp -r "$WORK/vitlora" "$WORK/vitlegacy"
if python3 - "$TOOL" "$WORK" <<'PY'; then ok; else fail "could not write the legacy-named ViT adapter"; fi
import json, os, random, re, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import safetensors_tool as st
d = sys.argv[2] + "/vitlegacy"
c = json.load(open(d + "/adapter_config.json"))
c["target_modules"] = ["dense"]
json.dump(c, open(d + "/adapter_config.json", "w"))
legacy = {"attention.o_proj": "attention.output.dense", "mlp.fc1": "intermediate.dense", "mlp.fc2": "output.dense"}
def rename(k):
    m = re.match(r"base_model\.model\.vit\.layers\.(\d+)\.(attention\.o_proj|mlp\.fc[12])\.(lora_[AB]\.weight)$", k)
    return k if not m else f"base_model.model.vit.encoder.layer.{m[1]}.{legacy[m[2]]}.{m[3]}"
t, meta = st.read(d + "/adapter_model.safetensors")
renamed = {rename(k): v for k, v in t.items()}
assert sum(k != rename(k) for k in t) == 24, sorted(t)
st.write(d + "/adapter_model.safetensors", renamed, meta)
rng = random.Random(3)
px = struct.pack("<%df" % (2 * 28 * 28), *[rng.uniform(-1, 1) for _ in range(2 * 28 * 28)])
st.write(sys.argv[2] + "/px.safetensors", {"pixel_values": {"dtype": "F32", "shape": [2, 1, 28, 28], "data": px}}, None)
PY
for a in vitlora vitlegacy; do
  expect_ok "$LT" eval --model "$WORK/vitbase" --adapter "$WORK/$a" --inputs "$WORK/px.safetensors" --out "$WORK/$a.logits.safetensors"
  expect_ok "$LT" merge --model "$WORK/vitbase" --adapter "$WORK/$a" --out "$WORK/$a.merged"
  expect_grep "merged 12 LoRA layers" "$WORK/out"
done
if cmp -s "$WORK/vitlora.logits.safetensors" "$WORK/vitlegacy.logits.safetensors"; then ok; else
  fail "the legacy-named ViT adapter gives other logits"; fi
python3 "$TOOL" digest "$WORK/vitlora.merged" >"$WORK/a"
python3 "$TOOL" digest "$WORK/vitlegacy.merged" >"$WORK/b"
if [ -s "$WORK/a" ] && diff "$WORK/a" "$WORK/b" >/dev/null; then ok; else fail "the legacy-named ViT adapter merges to other weights"; fi
expect_ok "$LT" train --model "$WORK/vitbase" "${VB[@]}" --steps 1 --lr 0 --lora-rank 4 --lora-init "$WORK/vitlegacy"

# plan == measured (cpu): the adapters, their gradients and states are all in the prediction.
P=(--model gpt2-tiny --data synthetic --batch 4 --seq-len 32 --steps 2 --eval-batches 1 --lora-rank 8 --checkpoint blocks)
expect_ok "$LT" plan "${P[@]}" --device-type cpu --json
cp "$WORK/out" "$WORK/plan.json"
expect_ok "$LT" train "${P[@]}" --device cpu --metrics-json "$WORK/run.json"
if python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY'; then ok; else fail "LoRA: plan != measured"; fi
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert plan["peak_allocated_bytes"] == run["peak_allocated_bytes"], (plan["peak_allocated_bytes"], run["peak_allocated_bytes"])
PY

# Refusals: one line each.
expect_error 2 "--lora-targets 'nothing' matches no module" "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lora-rank 4 --lora-targets nothing
expect_error 2 "--lora-targets .* matches transformer.h.0.attn \(a GPT2Attention\): LoRA adapts linear layers only" \
  "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lora-rank 4 --lora-targets 'transformer\.h\.0\.attn'
expect_error 2 "--lora-targets '\(': it is not a valid regular expression" "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lora-rank 4 --lora-targets '('
expect_error 2 "--lora-rank 200: transformer.h.0.attn.c_attn maps 128 -> 384 features" "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lora-rank 200
expect_error 2 "--lora-rank" "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lora-rank -1
expect_error 2 "--lora-alpha 0: it must be positive" "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lora-rank 4 --lora-alpha 0
expect_error 2 "--lora-dropout 1: it must be in \[0, 1\)" "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lora-rank 4 --lora-dropout 1
expect_error 2 "--lora-dropout -0.1: it must be in \[0, 1\)" "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lora-rank 4 --lora-dropout -0.1
expect_error 2 "--lora-targets: it configures LoRA adapters, and --lora-rank is 0" "$LT" train --model gpt2-tiny "${G[@]}" --batch 4 --steps 1 --lora-targets c_attn
expect_error 1 "cannot resume from $WORK/vit with --lora-rank 0: it is a LoRA checkpoint" "$LT" train --resume "$WORK/vit" --lora-rank 0
expect_error 1 "cannot resume from $WORK/base with --lora-rank 4: it holds a whole model, not LoRA adapters" \
  "$LT" train --resume "$WORK/base" --lora-rank 4 --steps 3
expect_error 2 "--lora-targets 'nothing' matches no module" "$LT" plan --model gpt2-tiny --data synthetic --lora-rank 4 --lora-targets nothing
finish
