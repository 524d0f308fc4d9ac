# Qwen3.5 text from the command line (issue 44): plan on the presets; a tiny qwen3_5_text config.json
# (both layer kinds, sequences longer than a DeltaNet chunk) trained on fortunes on the CPU, saved
# sharded with transformers' names and a qwen3_5_text config.json, read back by --resume, --model DIR
# and generate; a multimodal qwen3_5 directory (text_config, model.language_model.*, a vision tower and
# MTP layers to skip) read by --model DIR; LoRA with PEFT's names on every linear, the DeltaNet's
# projections included; plan == run on the CPU for the tiny preset checkpointed; --packing docs (the
# default) with documents across the DeltaNet's chunks: plan == run to the byte, against none.
source "$(dirname "$0")/common.bash" "$@"
T=(timeout 300)
TOK="$(cd "$(dirname "$0")/../data/tokenizers" && pwd)"

for m in qwen3.5-0.8b qwen3.5-2b qwen3.5-4b qwen3.5-9b; do
  expect_ok "${T[@]}" "$LT" plan --model "$m" --data synthetic --batch 1 --seq-len 512 --precision bf16-true \
    --lora-rank 16 --checkpoint blocks || continue
  expect_grep "^model $m: Qwen3.5, " "$WORK/out" "plan --model $m"
done

cat >"$WORK/q.json" <<'JSON'
{"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"], "vocab_size": 4096, "hidden_size": 32,
 "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
 "linear_num_key_heads": 2, "linear_key_head_dim": 8, "linear_num_value_heads": 4, "linear_value_head_dim": 6,
 "linear_conv_kernel_dim": 4, "full_attention_interval": 2, "max_position_embeddings": 512,
 "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.5,
   "mrope_section": [2, 1, 1], "mrope_interleaved": true},
 "mtp_num_hidden_layers": 1, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
JSON
expect_ok "${T[@]}" "$LT" train --config "$WORK/q.json" --tokenizer "$TOK/llama3" --data fortunes --steps 20 --batch 4 \
  --seq-len 80 --lr 3e-3 --eval-batches 1 --device cpu --save "$WORK/q" --save-shard-size 100KB || { finish; exit 1; }
expect_grep "model .*: Qwen3.5, " "$WORK/out" "qwen3.5 run"
python3 - "$WORK/out" <<'PY' || fail "qwen3.5 loss does not fall"
import re, sys
losses = [float(m) for m in re.findall(r"\| loss ([0-9.]+) \|", open(sys.argv[1]).read())]
assert len(losses) == 20 and losses[-1] < losses[0] - 0.3, losses
PY
if [ -f "$WORK/q/model.safetensors.index.json" ]; then ok; else fail "qwen3.5 save is not sharded"; fi
python3 - "$WORK/q" <<'PY' || fail "qwen3.5 names / config.json"
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/model.safetensors.index.json"))["weight_map"]
for want in ["model.embed_tokens.weight", "model.layers.0.linear_attn.in_proj_qkv.weight",
             "model.layers.0.linear_attn.in_proj_z.weight", "model.layers.0.linear_attn.in_proj_b.weight",
             "model.layers.0.linear_attn.in_proj_a.weight", "model.layers.0.linear_attn.conv1d.weight",
             "model.layers.0.linear_attn.A_log", "model.layers.0.linear_attn.dt_bias",
             "model.layers.2.linear_attn.norm.weight", "model.layers.0.linear_attn.out_proj.weight",
             "model.layers.1.self_attn.q_proj.weight", "model.layers.3.self_attn.k_norm.weight",
             "model.layers.1.post_attention_layernorm.weight", "model.norm.weight"]:
    assert want in idx, want
assert "lm_head.weight" not in idx and len(set(idx.values())) > 1, idx
assert not any(k.startswith("mtp.") for k in idx), idx
c = json.load(open(d + "/config.json"))
assert c["model_type"] == "qwen3_5_text" and c["architectures"] == ["Qwen3_5ForCausalLM"], c
assert c["layer_types"] == ["linear_attention", "full_attention", "linear_attention", "full_attention"], c["layer_types"]
assert c["rope_parameters"]["partial_rotary_factor"] == 0.5 and c["rope_parameters"]["mrope_section"] == [2, 1, 1], c
assert c["mtp_num_hidden_layers"] == 1, c
PY
expect_ok "${T[@]}" "$LT" train --resume "$WORK/q" --steps 22 --device cpu
expect_grep "step 22/22" "$WORK/out" "qwen3.5 resumed run"
expect_ok "${T[@]}" "$LT" generate --checkpoint "$WORK/q" --prompt "Q: " --max-new-tokens 10 --temperature 0

# --packing docs: fortunes packed into rows of 150 tokens (several documents a row, across the delta
# rule's chunks of 64, each restarting the DeltaNet's state and convolution). The chunks, and so
# every allocation, do not depend on the documents: the plan predicts the run's peak to the byte,
# checkpointed or not, and `none` (one fortune a row) too.
for v in "docs none" "docs blocks" "none none"; do
  read -r pk ck <<<"$v"
  F=(--config "$WORK/q.json" --tokenizer "$TOK/llama3" --data fortunes --packing "$pk" --checkpoint "$ck" --steps 2
     --batch 3 --seq-len 150 --eval-batches 1 --log-every 0)
  expect_ok "${T[@]}" "$LT" train "${F[@]}" --device cpu --metrics-json "$WORK/pk-run.json" || continue
  expect_grep "packed, each attending to itself|one a row" "$WORK/out" "--packing $pk rows"
  expect_ok "${T[@]}" "$LT" plan "${F[@]}" --device-type cpu --json || continue
  python3 - "$WORK/out" "$WORK/pk-run.json" <<'PY' && ok || fail "qwen3.5 --packing $pk --checkpoint $ck: the run is off its plan"
import json, sys
p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert p["peak_allocated_bytes"] == r["peak_allocated_bytes"], (p["peak_allocated_bytes"], r["peak_allocated_bytes"])
PY
done

# The saved directory as a multimodal checkpoint: config.json nests the text tower under text_config,
# the weights move under model.language_model.*, and a vision tower and an MTP layer sit beside them.
python3 - "$WORK/q" "$WORK/mm" <<'PY' || fail "making the qwen3_5 directory"
import json, os, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return head, raw[8 + n:]
tensors = {}
idx = json.load(open(src + "/model.safetensors.index.json"))["weight_map"]
for f in sorted(set(idx.values())):
    head, data = read(src + "/" + f)
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        tensors[k] = (v["dtype"], v["shape"], data[a:b])
out = {}
for k, t in tensors.items():
    out["model.language_model." + k[len("model."):] if k.startswith("model.") else k] = t
out["model.visual.blocks.0.attn.qkv.weight"] = ("F32", [2, 2], b"\0" * 16)
out["mtp.layers.0.self_attn.q_proj.weight"] = ("F32", [2, 2], b"\0" * 16)
head, blob, off = {}, b"", 0
for k in sorted(out):
    dt, shape, data = out[k]
    head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
    blob += data
    off += len(data)
h = json.dumps(head).encode()
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + blob)
text = json.load(open(src + "/config.json"))
cfg = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
       "tie_word_embeddings": text.pop("tie_word_embeddings"), "text_config": text,
       "vision_config": {"model_type": "qwen3_5_vision", "depth": 1}}
json.dump(cfg, open(dst + "/config.json", "w"))
for f in os.listdir(src):
    if f.startswith("tokenizer"):
        shutil.copy(src + "/" + f, dst + "/" + f)
PY
expect_ok "${T[@]}" "$LT" train --model "$WORK/mm" --data fortunes --steps 2 --batch 2 --seq-len 70 --eval-batches 1 --device cpu
expect_grep "model .*: Qwen3.5, " "$WORK/out" "qwen3_5 directory"

# LoRA: PEFT's key names for every linear of both layer kinds (norms and the convolution not adapted).
expect_ok "${T[@]}" "$LT" train --config "$WORK/q.json" --tokenizer "$TOK/llama3" --data fortunes --steps 2 --batch 4 \
  --seq-len 32 --eval-batches 1 --device cpu --lora-rank 4 --save "$WORK/lora"
python3 "$(dirname "$0")/safetensors_tool.py" check "$WORK/lora/adapter_model.safetensors" >"$WORK/names" || fail "qwen3.5 adapter"
if grep -Eq "norm|conv1d|A_log|dt_bias" "$WORK/names"; then fail "qwen3.5: a norm, the convolution or a decay was adapted"; else ok; fi
for n in linear_attn.in_proj_qkv linear_attn.in_proj_z linear_attn.in_proj_b linear_attn.in_proj_a linear_attn.out_proj; do
  expect_grep "^base_model.model.model.layers.0.$n.lora_A.weight F32 \[4, " "$WORK/names" "qwen3.5 adapter $n"
done
expect_grep "^base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight F32 \[64, 4\]$" "$WORK/names" "qwen3.5 adapter q_proj (query and gate rows)"
python3 - "$WORK/lora/adapter_config.json" <<'PY' || fail "qwen3.5 adapter_config target_modules"
import json, sys
t = set(json.load(open(sys.argv[1]))["target_modules"])
want = {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj",
        "gate_proj", "up_proj", "down_proj"}
assert want <= t or all(any(x.endswith(w) for x in t) for w in want), t
PY
finish
