# The LLaMA family from the command line: plan on every preset (meta, any machine, no weights in
# memory), llama-tiny trained on fortunes on the CPU with its loss falling, saved with transformers'
# parameter names and a config.json transformers loads, read back by generate and --resume; a
# Qwen2 config.json through --config; one-line refusals of what the family does not compute.
# Every command runs under `timeout`: a hang fails.
source "$(dirname "$0")/common.bash" "$@"
T=(timeout 120)

# plan: every preset, in the TinyLlama benchmark's shape, with checkpointed blocks.
for m in llama-tiny smollm2-135m tinyllama-1.1b llama3.2-1b llama3-8b qwen2-0.5b qwen3-0.6b qwen3-8b; do
  expect_ok "${T[@]}" "$LT" plan --model "$m" --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed \
    --checkpoint blocks || continue
  expect_grep "^model $m: (LLaMA|Qwen2|Qwen3), " "$WORK/out" "plan --model $m"
  expect_grep "predicted peak allocated" "$WORK/out" "plan --model $m"
done
expect_ok "${T[@]}" "$LT" plan --model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed \
  --checkpoint blocks --json
python3 - "$WORK/out" <<'PY' || fail "tinyllama plan json"
import json, sys
j = json.load(open(sys.argv[1]))
# 1.1B f32 parameters, their gradients and two AdamW moments: 16 bytes each.
assert j["peak_allocated_bytes"] >= 16 * 1_100_048_384, j["peak_allocated_bytes"]
PY

# A LLaMA-family model reads text through a tokenizer.json: without one, one line.
expect_error 2 "model llama-tiny has no tokenizer: LLaMA models read text through a tokenizer.json" \
  "${T[@]}" "$LT" train --model llama-tiny --data fortunes --steps 2 --device cpu

# Training on the CPU: fortunes through the committed SentencePiece-style tokenizer (4096 ids, as
# llama-tiny's vocabulary), 30 steps, the loss falls; saved with transformers' names.
TOK="$(cd "$(dirname "$0")/../data/tokenizers" && pwd)"
expect_ok "${T[@]}" "$LT" train --model llama-tiny --tokenizer "$TOK/sentencepiece" --data fortunes --steps 30 --batch 8 --seq-len 64 --lr 3e-3 \
  --eval-batches 1 --device cpu --save "$WORK/tiny" || { finish; exit 1; }
python3 - "$WORK/out" <<'PY' || fail "llama-tiny loss does not fall"
import re, sys
losses = [float(m) for m in re.findall(r"\| loss ([0-9.]+) \|", open(sys.argv[1]).read())]
assert len(losses) == 30 and losses[-1] < losses[0] - 0.7, losses
PY
python3 "$(dirname "$0")/safetensors_tool.py" check "$WORK/tiny/model.safetensors" >"$WORK/names" || fail "model.safetensors"
for want in "^model.embed_tokens.weight F32 \[4096, 64\]$" "^model.layers.1.self_attn.k_proj.weight F32 \[32, 64\]$" \
            "^model.layers.0.mlp.gate_proj.weight F32 \[176, 64\]$" "^model.layers.1.post_attention_layernorm.weight " \
            "^model.norm.weight F32 \[64\]$"; do
  expect_grep "$want" "$WORK/names" "model.safetensors names"
done
if grep -q "lm_head" "$WORK/names"; then fail "a tied model saved lm_head.weight"; else ok; fi
python3 - "$WORK/tiny/config.json" <<'PY' || fail "config.json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["architectures"] == ["LlamaForCausalLM"] and j["model_type"] == "llama", j
assert (j["num_key_value_heads"], j["head_dim"], j["tie_word_embeddings"]) == (2, 16, True), j
PY
expect_ok "${T[@]}" "$LT" generate --checkpoint "$WORK/tiny" --prompt "Q: " --max-new-tokens 20 --temperature 0
if [ "$(head -c 3 "$WORK/out")" = "Q: " ]; then ok; else fail "generate output does not start with the prompt"; fi
expect_ok "${T[@]}" "$LT" train --resume "$WORK/tiny" --steps 32 --device cpu
expect_grep "step 32/32" "$WORK/out" "resumed run"

# A Qwen2 config.json (q/k/v biases, an untied head) trains through --config.
cat >"$WORK/qwen2.json" <<'EOF'
{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 4096, "hidden_size": 32,
 "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 128, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
 "use_sliding_window": false, "sliding_window": 4096, "bos_token_id": 1, "eos_token_id": 2}
EOF
expect_ok "${T[@]}" "$LT" train --config "$WORK/qwen2.json" --tokenizer "$TOK/llama3" --data fortunes --steps 3 --batch 4 --seq-len 32 \
  --eval-batches 1 --device cpu --save "$WORK/qwen"
expect_grep "model .*: Qwen2, " "$WORK/out" "qwen2 run"
python3 "$(dirname "$0")/safetensors_tool.py" check "$WORK/qwen/model.safetensors" >"$WORK/names" || fail "qwen2 file"
expect_grep "^model.layers.0.self_attn.q_proj.bias F32 \[32\]$" "$WORK/names" "qwen2 names"
expect_grep "^lm_head.weight F32 \[4096, 32\]$" "$WORK/names" "qwen2 names"
if grep -q "o_proj.bias" "$WORK/names"; then fail "qwen2 has no o_proj bias"; else ok; fi
expect_grep '"eos_token_id": 2' "$WORK/qwen/config.json" "qwen2 config.json keeps eos_token_id"

# A Qwen3 config.json (q_norm / k_norm, head_dim 12 over width 32, a tied head) trains through
# --config, saves its head norms under transformers' names, and reads them back with --resume.
cat >"$WORK/qwen3.json" <<'EOF'
{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 4096, "hidden_size": 32,
 "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
 "max_position_embeddings": 128, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
 "use_sliding_window": false, "sliding_window": null, "max_window_layers": 28, "bos_token_id": 1, "eos_token_id": 2}
EOF
expect_ok "${T[@]}" "$LT" train --config "$WORK/qwen3.json" --tokenizer "$TOK/llama3" --data fortunes --steps 3 --batch 4 --seq-len 32 \
  --eval-batches 1 --device cpu --save "$WORK/qwen3" || { finish; exit 1; }
expect_grep "model .*: Qwen3, " "$WORK/out" "qwen3 run"
python3 "$(dirname "$0")/safetensors_tool.py" check "$WORK/qwen3/model.safetensors" >"$WORK/names" || fail "qwen3 file"
expect_grep "^model.layers.1.self_attn.q_norm.weight F32 \[12\]$" "$WORK/names" "qwen3 names"
expect_grep "^model.layers.0.self_attn.k_norm.weight F32 \[12\]$" "$WORK/names" "qwen3 names"
expect_grep "^model.layers.0.self_attn.q_proj.weight F32 \[48, 32\]$" "$WORK/names" "qwen3 names"
if grep -q "lm_head\|q_proj.bias" "$WORK/names"; then fail "qwen3: a tied head or a q bias was saved"; else ok; fi
expect_grep '"Qwen3ForCausalLM"' "$WORK/qwen3/config.json" "qwen3 config.json"
expect_ok "${T[@]}" "$LT" train --resume "$WORK/qwen3" --steps 4 --device cpu
expect_grep "step 4/4" "$WORK/out" "qwen3 resumed run"
# Sliding windows (the attention's window): a Mistral window of 8 on every layer, a Qwen3 one on
# the layers from max_window_layers on; trained on the CPU at T 32, longer than the windows.
echo '{"model_type": "qwen3", "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 2, "vocab_size": 4096, "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 1}' >"$WORK/qwen3_sw.json"
echo '{"model_type": "mistral", "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 4096, "sliding_window": 8}' >"$WORK/mistral_sw.json"
for m in qwen3_sw mistral_sw; do
  expect_ok "${T[@]}" "$LT" train --config "$WORK/$m.json" --tokenizer "$TOK/llama3" --data fortunes --steps 2 --batch 2 \
    --seq-len 32 --eval-batches 1 --device cpu --save "$WORK/$m" || continue
  python3 - "$WORK/$m/config.json" <<'PY' || fail "$m config.json keeps the window"
import json, sys
assert json.load(open(sys.argv[1]))["sliding_window"] == 8
PY
done

# Refusals: one line each, exit 1.
cfg() { echo "$2" >"$WORK/$1.json"; }
cfg yarn '{"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 300, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}'
cfg mistral '{"model_type": "mistral", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 300, "sliding_window": -1}'
cfg kv '{"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 3, "num_hidden_layers": 1, "vocab_size": 300}'
for cmd in train plan; do
  expect_error 1 "rope_scaling type 'yarn' is not supported" "${T[@]}" "$LT" $cmd --config "$WORK/yarn.json" --data synthetic --steps 1 --batch 2
  expect_error 1 "mistral 'sliding_window' is -1: it counts the keys each query sees" "${T[@]}" "$LT" $cmd --config "$WORK/mistral.json" --data synthetic --steps 1 --batch 2
  expect_error 1 "num_attention_heads 4 is not divisible by num_key_value_heads 3" "${T[@]}" "$LT" $cmd --config "$WORK/kv.json" --data synthetic --steps 1 --batch 2
done
expect_error 2 "does not divide|not divisible" "${T[@]}" "$LT" plan --model llama-tiny --heads 3 --data synthetic --steps 1 --batch 2
finish
