# Gemma 3 text and Qwen3 from the command line (issue 44): plan on the presets; a tiny Gemma 3
# config.json trained on fortunes on the CPU, saved sharded with transformers' names and a
# gemma3_text config.json, read back by --resume and generate; a sequence longer than the sliding
# window trained; LoRA on both with PEFT's names.
source "$(dirname "$0")/common.bash" "$@"
T=(timeout 120)
TOK="$(cd "$(dirname "$0")/../data/tokenizers" && pwd)"

for m in gemma3-270m gemma3-1b gemma3-4b qwen3-1.7b; do
  expect_ok "${T[@]}" "$LT" plan --model "$m" --data synthetic --batch 2 --seq-len 512 --precision bf16-mixed \
    --checkpoint blocks || continue
  expect_grep "^model $m: (Gemma3|Qwen3), " "$WORK/out" "plan --model $m"
done

# The help names each family once, though Gemma 3 and Qwen3.5 register a text and a multimodal type.
expect_ok "${T[@]}" "$LT" --help
python3 - "$WORK/out" <<'PY' || fail "the help names a family twice"
import re, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("Model families: "))
names = line[len("Model families: "):].strip().split(", ")
assert "Gemma3" in names and len(names) == len(set(names)), names
PY

cat >"$WORK/gemma.json" <<'JSON'
{"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": 4096, "hidden_size": 32,
 "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
 "query_pre_attn_scalar": 16, "max_position_embeddings": 256, "sliding_window": 32, "sliding_window_pattern": 3,
 "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
 "final_logit_softcapping": null, "attn_logit_softcapping": null, "hidden_activation": "gelu_pytorch_tanh",
 "bos_token_id": 1, "eos_token_id": 2}
JSON
expect_ok "${T[@]}" "$LT" train --config "$WORK/gemma.json" --tokenizer "$TOK/llama3" --data fortunes --steps 20 --batch 8 \
  --seq-len 32 --lr 3e-3 --eval-batches 1 --device cpu --save "$WORK/g" --save-shard-size 200KB || { finish; exit 1; }
expect_grep "model .*: Gemma3, " "$WORK/out" "gemma3 run"
python3 - "$WORK/out" <<'PY' || fail "gemma3 loss does not fall"
import re, sys
losses = [float(m) for m in re.findall(r"\| loss ([0-9.]+) \|", open(sys.argv[1]).read())]
assert len(losses) == 20 and losses[-1] < losses[0] - 0.3, losses
PY
if [ -f "$WORK/g/model.safetensors.index.json" ]; then ok; else fail "gemma3 save is not sharded"; fi
python3 - "$WORK/g" <<'PY' || fail "gemma3 names / config.json"
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/model.safetensors.index.json"))["weight_map"]
for want in ["model.embed_tokens.weight", "model.layers.2.post_feedforward_layernorm.weight",
             "model.layers.0.pre_feedforward_layernorm.weight", "model.layers.1.self_attn.k_norm.weight",
             "model.layers.0.mlp.gate_proj.weight", "model.norm.weight"]:
    assert want in idx, want
assert "lm_head.weight" not in idx and len(set(idx.values())) > 1, idx
c = json.load(open(d + "/config.json"))
assert c["model_type"] == "gemma3_text" and c["architectures"] == ["Gemma3ForCausalLM"], c
assert c["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"], c["layer_types"]
assert c["rope_scaling"] == {"rope_type": "linear", "factor": 8.0} and c["sliding_window"] == 32, c
PY
expect_ok "${T[@]}" "$LT" train --resume "$WORK/g" --steps 22 --device cpu
expect_grep "step 22/22" "$WORK/out" "gemma3 resumed run"
expect_ok "${T[@]}" "$LT" generate --checkpoint "$WORK/g" --prompt "Q: " --max-new-tokens 10 --temperature 0
# Longer than the window (32): the sliding layers attend to their window.
expect_ok "${T[@]}" "$LT" train --config "$WORK/gemma.json" --data synthetic --steps 2 --batch 2 --seq-len 80 --device cpu

# LoRA on both: PEFT's key names for every projection (q_norm / k_norm are not adapted).
lora_names() {  # $1: what, $2: save dir, then the model flags
  local what=$1 dir=$2
  shift 2
  expect_ok "${T[@]}" "$LT" train "$@" --tokenizer "$TOK/llama3" --data fortunes --steps 2 --batch 4 --seq-len 32 \
    --eval-batches 1 --device cpu --lora-rank 4 --save "$dir" || return
  python3 "$(dirname "$0")/safetensors_tool.py" check "$dir/adapter_model.safetensors" >"$WORK/names" || fail "$what adapter"
  if grep -q "norm" "$WORK/names"; then fail "$what: a norm was adapted"; else ok; fi
}
lora_names gemma3 "$WORK/lora-g" --config "$WORK/gemma.json"
expect_grep "^base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight F32 \[4, 32\]$" "$WORK/names" "gemma3 adapter"
expect_grep "^base_model.model.model.layers.0.mlp.down_proj.lora_B.weight F32 \[32, 4\]$" "$WORK/names" "gemma3 adapter"
lora_names qwen3 "$WORK/lora-q" --model qwen3-tiny
expect_grep "^base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight F32 \[24, 4\]$" "$WORK/names" "qwen3 adapter"
expect_grep "^base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight F32 \[4, 48\]$" "$WORK/names" "qwen3 adapter"
finish
