# --quantize nf4: llama-tiny trains with its block linears in NF4 (bitsandbytes' Linear4bit), the
# save holds bitsandbytes' six tensors per layer and transformers' quantization_config, the save
# loads back as it is (byte-identical tensors after an lr-0 step), a 16-bit model directory is
# quantised at load, plan predicts the run's peak to the byte, and bad values are one line each.
source "$(dirname "$0")/common.bash" "$@"
TINY=(--model llama-tiny)
ARGS=(--data synthetic --batch 2 --seq-len 32 --eval-batches 1 --device cpu --precision bf16-true)

expect_error 2 "^leantrain: error: --quantize int4: the choices are none or nf4 \(pass one of them\)" \
  "$LT" train "${TINY[@]}" "${ARGS[@]}" --steps 1 --quantize int4
expect_error 2 "^leantrain: error: --quantize int4" "$LT" plan "${TINY[@]}" "${ARGS[@]}" --steps 1 --quantize int4

expect_ok "$LT" train "${TINY[@]}" "${ARGS[@]}" --steps 3 --quantize nf4 --save "$WORK/q"
expect_grep "14 linear layers in NF4" "$WORK/out" "train's model line"
if python3 - "$WORK/q" <<'PY'; then ok; else fail "the save is not bitsandbytes' layout"; fi
import json, struct, sys
d = sys.argv[1]
f = open(d + "/model.safetensors", "rb")
h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
w = "model.layers.0.mlp.down_proj.weight"  # [64, 176]: 11264 weights
assert h[w]["dtype"] == "U8" and h[w]["shape"] == [5632, 1], h[w]
for s, dt, shape in ((".absmax", "U8", [176]), (".quant_map", "F32", [16]), (".nested_absmax", "F32", [1]),
                     (".nested_quant_map", "F32", [256])):
    assert h[w + s]["dtype"] == dt and h[w + s]["shape"] == shape, (s, h[w + s])
st = h[w + ".quant_state.bitsandbytes__nf4"]
f.seek(8 + struct.unpack("<Q", open(d + "/model.safetensors", "rb").read(8))[0] + st["data_offsets"][0])
state = json.loads(f.read(st["data_offsets"][1] - st["data_offsets"][0]))
assert list(state) == ["quant_type", "blocksize", "dtype", "shape", "nested_blocksize", "nested_dtype", "nested_offset"], state
assert state["shape"] == [64, 176] and state["dtype"] == "bfloat16" and state["quant_type"] == "nf4", state
assert not any(k.endswith(("weight_absmax", "weight_nested_absmax")) for k in h), "store names leaked into the file"
assert h["model.embed_tokens.weight"]["dtype"] == "BF16"
qc = json.load(open(d + "/config.json"))["quantization_config"]
assert qc == {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
              "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
              "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False,
              "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False,
              "quant_method": "bitsandbytes"}, qc
PY

# The saved directory as --model: read as it is (quantization_config implies nf4); an lr-0 step
# saves the same bytes.
expect_ok "$LT" train "${ARGS[@]}" --model "$WORK/q" --steps 1 --lr 0 --save "$WORK/q2"
expect_grep "14 linear layers in NF4 as saved by bitsandbytes" "$WORK/out" "the reload's model line"
if python3 - "$WORK/q/model.safetensors" "$WORK/q2/model.safetensors" <<'PY'; then ok; else fail "reload changed the weights"; fi
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys()
assert all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]][:3]
PY

# A bitsandbytes directory leantrain cannot read: one line naming the setting.
mkdir -p "$WORK/fp4"
cp "$WORK/q/model.safetensors" "$WORK/fp4/"
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['quantization_config']['bnb_4bit_quant_type']='fp4'; json.dump(c, open(sys.argv[2],'w'))" \
  "$WORK/q/config.json" "$WORK/fp4/config.json"
expect_error 1 "^leantrain: error: .*quantization_config.bnb_4bit_quant_type: 'fp4' is not supported" \
  "$LT" train "${ARGS[@]}" --model "$WORK/fp4" --steps 1

# A 16-bit model directory quantised at load, layer by layer.
expect_ok "$LT" train "${TINY[@]}" "${ARGS[@]}" --steps 1 --save "$WORK/plain"
expect_ok "$LT" train "${ARGS[@]}" --model "$WORK/plain" --quantize nf4 --steps 1
expect_grep "14 linear layers in NF4; weights loaded from" "$WORK/out" "the quantised load's model line"

# plan == the CPU run's peak, checkpointed.
expect_ok "$LT" plan "${TINY[@]}" "${ARGS[@]}" --steps 2 --quantize nf4 --checkpoint blocks --device-type cpu --json
cp "$WORK/out" "$WORK/plan.json"
expect_ok "$LT" train "${TINY[@]}" "${ARGS[@]}" --steps 2 --quantize nf4 --checkpoint blocks --metrics-json "$WORK/run.json"
if python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY'; then ok; else fail "nf4: plan != measured"; fi
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert plan["peak_allocated_bytes"] == run["peak_allocated_bytes"], (plan["peak_allocated_bytes"], run["peak_allocated_bytes"])
PY

# QLoRA (LoRA adapters around the NF4 layers): the plan is the run's peak too.
expect_ok "$LT" plan "${TINY[@]}" "${ARGS[@]}" --steps 2 --quantize nf4 --lora-rank 8 --checkpoint blocks --device-type cpu --json
cp "$WORK/out" "$WORK/plan.json"
expect_ok "$LT" train "${TINY[@]}" "${ARGS[@]}" --steps 2 --quantize nf4 --lora-rank 8 --checkpoint blocks --metrics-json "$WORK/run.json"
expect_grep "LoRA r 8, alpha 8 .* on 14 linear layers" "$WORK/out" "the QLoRA run's LoRA line"
if python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY'; then ok; else fail "qlora: plan != measured"; fi
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert plan["peak_allocated_bytes"] == run["peak_allocated_bytes"], (plan["peak_allocated_bytes"], run["peak_allocated_bytes"])
PY
finish
