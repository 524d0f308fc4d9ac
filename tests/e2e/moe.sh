# Mixture of experts from the command line (issue 45): plan on the full-size presets; the tiny
# Qwen3-MoE and Mixtral trained on the CPU with the load-balancing loss on; plan == the CPU run's
# peak (checkpointed, bf16 autocast); --save writes the hub's per-expert tensors and a config.json
# that reads back; LoRA on the experts in PEFT's layout, eval with the adapter equal to the merged
# model's logits; QLoRA on NF4 experts (loss, plan == measured, merge) and a whole NF4 model's
# bitsandbytes save read back.
source "$(dirname "$0")/common.bash" "$@"
T=(timeout 300)
TOOL="$(dirname "$0")/safetensors_tool.py"
TOK="$(cd "$(dirname "$0")/../data/tokenizers" && pwd)"

for m in qwen3-30b-a3b mixtral-8x7b; do
  expect_ok "${T[@]}" "$LT" plan --model "$m" --data synthetic --batch 1 --seq-len 2048 --precision bf16-true \
    --lora-rank 16 --checkpoint blocks --optimizer adamw8bit || continue
  expect_grep "^model $m: (Qwen3-MoE|Mixtral), " "$WORK/out" "plan --model $m"
  expect_grep "^LoRA r 16, .* MoE experts' gate_up_proj, down_proj" "$WORK/out" "plan --model $m: the experts' adapters"
done

cat >"$WORK/moe.json" <<'JSON'
{"model_type": "qwen3_moe", "vocab_size": 4096, "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 24,
 "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_experts": 6,
 "num_experts_per_tok": 2, "norm_topk_prob": true, "mlp_only_layers": [1], "output_router_logits": true,
 "router_aux_loss_coef": 0.01, "max_position_embeddings": 128, "tie_word_embeddings": false}
JSON
cat >"$WORK/mixtral.json" <<'JSON'
{"model_type": "mixtral", "vocab_size": 4096, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
 "output_router_logits": true, "router_aux_loss_coef": 0.02, "max_position_embeddings": 128}
JSON
for name in moe mixtral; do
  expect_ok "${T[@]}" "$LT" train --config "$WORK/$name.json" --tokenizer "$TOK/sentencepiece" --data fortunes \
    --steps 16 --batch 4 --seq-len 32 --lr 1e-2 --eval-batches 1 --device cpu --save "$WORK/$name" || { finish; exit 1; }
  python3 - "$WORK/out" <<'PY' || fail "$name loss does not fall"
import re, sys
losses = [float(m) for m in re.findall(r"\| loss ([0-9.]+) \|", open(sys.argv[1]).read())]
assert len(losses) == 16 and losses[-1] < losses[0] - 0.3, losses
PY
  # plan == the CPU run's peak, checkpointed, under autocast.
  F=(--config "$WORK/$name.json" --data synthetic --steps 2 --batch 2 --seq-len 16 --precision bf16-mixed --checkpoint blocks)
  expect_ok "${T[@]}" "$LT" plan "${F[@]}" --device-type cpu --json
  cp "$WORK/out" "$WORK/plan.json"
  expect_ok "${T[@]}" "$LT" train "${F[@]}" --device cpu --eval-batches 0 --metrics-json "$WORK/run.json"
  if python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY'; then ok; else fail "$name: plan != measured"; fi
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert plan["peak_allocated_bytes"] == run["peak_allocated_bytes"], (plan["peak_allocated_bytes"], run["peak_allocated_bytes"])
PY
done
# The hub's layout: one tensor per expert and projection.
python3 "$TOOL" digest "$WORK/moe" > "$WORK/names" || fail "moe save"
expect_grep "^model.layers.2.mlp.experts.5.down_proj.weight F32 \[32, 24\] " "$WORK/names" "qwen3_moe hub names"
expect_grep "^model.layers.0.mlp.gate.weight F32 \[6, 32\] " "$WORK/names" "qwen3_moe router"
expect_grep "^model.layers.1.mlp.up_proj.weight F32 \[48, 32\] " "$WORK/names" "qwen3_moe dense layer"
python3 "$TOOL" digest "$WORK/mixtral" > "$WORK/names" || fail "mixtral save"
expect_grep "^model.layers.1.block_sparse_moe.experts.3.w3.weight F32 \[40, 32\] " "$WORK/names" "mixtral hub names"
expect_ok "${T[@]}" "$LT" train --resume "$WORK/moe" --steps 17 --device cpu
expect_grep "step 17/17" "$WORK/out" "qwen3_moe resumed run"

# LoRA on the experts (and the attention): PEFT's ParamWrapper keys, then merge == base + adapter.
expect_ok "${T[@]}" "$LT" train --model "$WORK/moe" --data synthetic --steps 3 --batch 4 --seq-len 16 --lr 1e-2 \
  --eval-batches 0 --device cpu --lora-rank 4 --lora-alpha 8 --save "$WORK/ck" || { finish; exit 1; }
expect_grep "MoE experts' gate_up_proj, down_proj" "$WORK/out" "the LoRA line names the experts"
if python3 - "$TOOL" "$WORK/ck" <<'PY'; then ok; else fail "expert adapter layout"; fi
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import safetensors_tool as st
c = json.load(open(sys.argv[2] + "/adapter_config.json"))
assert c["target_parameters"] == ["experts.gate_up_proj", "experts.down_proj"], c
t, _ = st.read(sys.argv[2] + "/adapter_model.safetensors")
p = "base_model.model.model.layers.0.mlp.experts."
assert t[p + "base_layer.lora_A.weight"]["shape"] == [6 * 4, 48], t[p + "base_layer.lora_A.weight"]
assert t[p + "base_layer.lora_B.weight"]["shape"] == [32, 4 * 6], t[p + "base_layer.lora_B.weight"]
assert t[p + "lora_A.weight"]["shape"] == [6 * 4, 32] and t[p + "lora_B.weight"]["shape"] == [24, 4 * 6]
assert not any(".mlp.gate." in k for k in t), "the router was adapted"
assert not any("layers.1.mlp.experts" in k for k in t), "a dense layer has experts"
PY
python3 "$TOOL" ids "$WORK/ids.safetensors" 2 16 256 1
expect_ok "${T[@]}" "$LT" merge --model "$WORK/moe" --adapter "$WORK/ck" --out "$WORK/merged"
expect_ok "${T[@]}" "$LT" eval --model "$WORK/moe" --adapter "$WORK/ck" --inputs "$WORK/ids.safetensors" --out "$WORK/lora.safetensors"
expect_ok "${T[@]}" "$LT" eval --model "$WORK/merged" --inputs "$WORK/ids.safetensors" --out "$WORK/merged.safetensors"
expect_ok "${T[@]}" "$LT" eval --model "$WORK/moe" --inputs "$WORK/ids.safetensors" --out "$WORK/base.safetensors"
if python3 - "$TOOL" "$WORK" <<'PY'; then ok; else fail "merged logits differ from the LoRA model's"; fi
import os, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import safetensors_tool as st
def logits(name):
    e = st.read(f"{sys.argv[2]}/{name}.safetensors")[0]["logits"]
    return struct.unpack(f"<{len(e['data']) // 4}f", e["data"])
lora, merged, base = logits("lora"), logits("merged"), logits("base")
assert max(abs(a - b) for a, b in zip(lora, merged)) < 1e-4
assert max(abs(a - b) for a, b in zip(lora, base)) > 1e-4  # the adapter changed the model
PY
python3 "$TOOL" digest "$WORK/merged" > "$WORK/names"
if grep -q "lora" "$WORK/names"; then fail "the merged model holds adapter tensors"; else ok; fi

# QLoRA on NF4 experts (--quantize nf4 with --lora-rank): the loss falls; plan == the CPU run's peak
# (one and several dequantised groups of experts a GEMM); a base quantised at load from the 16-bit
# directory trains an adapter that merges into that directory as any adapter does.
# (The loss: adapters on the experts alone, over a random base, on a text it can learn.)
Q=(--quantize nf4 --lora-rank 4 --lora-alpha 8 --device cpu)
python3 -c "print('the quick brown fox jumps over the lazy dog. ' * 400)" > "$WORK/fox.txt"
expect_ok "${T[@]}" "$LT" train --config "$WORK/moe.json" --tokenizer "$TOK/sentencepiece" --data "$WORK/fox.txt" "${Q[@]}" \
  --lora-targets '.*\.experts' --steps 16 --batch 4 --seq-len 32 --lr 3e-2 --eval-batches 1 || { finish; exit 1; }
expect_grep "15 linear layers and 2 layers' experts in NF4" "$WORK/out" "the QLoRA run's model line"
expect_grep "^LoRA r 4, alpha 8 \(scaling 2\) on 0 linear layers \(2 MoE experts' gate_up_proj, down_proj\)" "$WORK/out" \
  "the QLoRA run's LoRA line"
python3 - "$WORK/out" <<'PY' || fail "QLoRA on NF4 experts: the loss does not fall"
import re, sys
losses = [float(m) for m in re.findall(r"\| loss ([0-9.]+) \|", open(sys.argv[1]).read())]
assert len(losses) == 16 and losses[-1] < losses[0] - 0.3, losses
PY
for group in 0 2; do
  F=(--config "$WORK/moe.json" --data synthetic --steps 2 --batch 2 --seq-len 16 --precision bf16-true --checkpoint blocks "${Q[@]}")
  LEANTRAIN_NF4_EXPERT_GROUP=$group expect_ok "${T[@]}" "$LT" plan "${F[@]}" --device-type cpu --json
  cp "$WORK/out" "$WORK/plan.json"
  LEANTRAIN_NF4_EXPERT_GROUP=$group expect_ok "${T[@]}" "$LT" train "${F[@]}" --eval-batches 0 --metrics-json "$WORK/run.json"
  if python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY'; then ok; else fail "QLoRA on NF4 experts (group $group): plan != measured"; fi
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert plan["peak_allocated_bytes"] == run["peak_allocated_bytes"], (plan["peak_allocated_bytes"], run["peak_allocated_bytes"])
PY
done
expect_ok "${T[@]}" "$LT" train --model "$WORK/moe" --data synthetic --steps 3 --batch 4 --seq-len 16 --lr 1e-2 \
  --eval-batches 0 "${Q[@]}" --save "$WORK/qck" || { finish; exit 1; }
expect_grep "layers' experts in NF4; weights loaded from" "$WORK/out" "quantised at load from the 16-bit directory"
expect_ok "${T[@]}" "$LT" merge --model "$WORK/moe" --adapter "$WORK/qck" --out "$WORK/qmerged"
expect_ok "${T[@]}" "$LT" eval --model "$WORK/moe" --adapter "$WORK/qck" --inputs "$WORK/ids.safetensors" --out "$WORK/qlora.safetensors"
expect_ok "${T[@]}" "$LT" eval --model "$WORK/qmerged" --inputs "$WORK/ids.safetensors" --out "$WORK/qmerged.safetensors"
if python3 - "$TOOL" "$WORK" <<'PY'; then ok; else fail "the QLoRA adapter merged differs from it applied"; fi
import os, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import safetensors_tool as st
def logits(name):
    e = st.read(f"{sys.argv[2]}/{name}.safetensors")[0]["logits"]
    return struct.unpack(f"<{len(e['data']) // 4}f", e["data"])
lora, merged, base = logits("qlora"), logits("qmerged"), logits("base")
assert max(abs(a - b) for a, b in zip(lora, merged)) < 1e-4
assert max(abs(a - b) for a, b in zip(lora, base)) > 1e-4
PY

# A whole NF4 model: each expert's projection saved as bitsandbytes' six tensors under the hub's
# name; read back as it is (the same bytes after an lr-0 step); eval reads it.
expect_ok "${T[@]}" "$LT" train --model "$WORK/moe" --data synthetic --steps 1 --batch 2 --seq-len 16 --eval-batches 0 \
  --device cpu --quantize nf4 --save "$WORK/nf4" || { finish; exit 1; }
python3 "$TOOL" digest "$WORK/nf4" > "$WORK/names" || fail "nf4 save"
expect_grep "^model.layers.2.mlp.experts.5.down_proj.weight U8 \[384, 1\] " "$WORK/names" "an NF4 expert's codes"
expect_grep "^model.layers.2.mlp.experts.5.gate_proj.weight.quant_state.bitsandbytes__nf4 U8 " "$WORK/names" "an NF4 expert's state"
if grep -qE "gate_up_proj|proj_absmax|proj_nested_absmax|weight_absmax" "$WORK/names"; then fail "store names in the NF4 save"; else ok; fi
expect_ok "${T[@]}" "$LT" train --model "$WORK/nf4" --data synthetic --steps 1 --batch 2 --seq-len 16 --eval-batches 0 \
  --device cpu --lr 0 --save "$WORK/nf4b"
expect_grep "layers' experts in NF4 as saved by bitsandbytes" "$WORK/out" "the NF4 reload's model line"
if python3 - "$WORK/nf4/model.safetensors" "$WORK/nf4b/model.safetensors" <<'PY'; then ok; else fail "reload changed the NF4 experts"; fi
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
expect_ok "${T[@]}" "$LT" eval --model "$WORK/nf4" --inputs "$WORK/ids.safetensors" --out "$WORK/nf4.safetensors"
finish
