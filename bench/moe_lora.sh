#!/usr/bin/env bash
# MoE LoRA side by side with transformers + PEFT (issue 45), one GPU call: the Qwen3-30B-A3B shape
# with 4 layers (bench/configs/qwen3-30b-a3b-4layers.json, random init), B2 x T2048, bf16 base,
# LoRA r 16 alpha 32 on every linear layer and the experts, checkpointed decoder layers, AdamW;
# then Qwen3-30B-A3B QLoRA on one GPU (NF4 base with NF4 experts, r 16 on every linear layer and
# the experts, B1 x T2048, checkpointed, adamw8bit): plan against measured (issue 45's target: a
# peak of 17.5 GiB or less), and the loss over 50 steps. Peer line: 33,752 tok/s at 13.84 GiB
# (transformers + PEFT); the goal is >= 2x tokens/s at <= 0.7x the peak.
# Fits one 10-minute device call with the defaults (ROUNDS=1; the QLoRA run only with QLORA=1,
# which is a call of its own: QLORA=1 ROUNDS=0 runs the QLoRA part alone).
#   BUILD=build-cuda OUT=$OUT ROUNDS=1 QLORA=0 bash bench/moe_lora.sh
#   BUILD=build-cuda OUT=$OUT ROUNDS=0 QLORA=1 bash bench/moe_lora.sh
# PEER=0 leaves transformers out (another leantrain configuration in the same call).
set -u
BUILD=${BUILD:-build}; OUT=${OUT:-/tmp/moe-lora}; ROUNDS=${ROUNDS:-1}; QLORA=${QLORA:-0}
mkdir -p "$OUT"
F="--config bench/configs/qwen3-30b-a3b-4layers.json --data synthetic --batch 2 --seq-len 2048 --precision bf16-true \
--lora-rank 16 --lora-alpha 32 --checkpoint blocks --optimizer adamw --lr 2e-4 ${MOE_EXTRA:-}"
[ "$ROUNDS" -gt 0 ] && { timeout 90 "./$BUILD/leantrain" plan $F --device-type cuda --json > "$OUT/plan.json" 2> "$OUT/plan.err" || { echo "plan failed"; tail -3 "$OUT/plan.err"; }; }
for round in $(seq 1 "$ROUNDS"); do
  timeout 150 "./$BUILD/leantrain" train $F --device cuda --steps 12 --eval-batches 0 --log-every 4 \
    --metrics-json "$OUT/run-$round.json" > "$OUT/run-$round.log" 2>&1 || { echo "run failed"; tail -5 "$OUT/run-$round.log"; }
  python3 - "$OUT/plan.json" "$OUT/run-$round.json" "$round" <<'PY' | tee -a "$OUT/moe-lora.jsonl"
import json, sys
try:
    plan = json.load(open(sys.argv[1]))
except Exception:
    plan = {}
run = json.load(open(sys.argv[2]))
print(json.dumps({"side": "leantrain", "round": int(sys.argv[3]), "tokens_per_s": round(run["steady_items_per_s"]),
                  "peak_allocated": run["peak_allocated_bytes"], "peak_reserved": run.get("peak_reserved_bytes"),
                  "plan_peak_allocated": plan.get("peak_allocated_bytes"), "plan_bounds": plan.get("bounds")}))
PY
  [ "${PEER:-1}" = 1 ] && { (cd bench/peers && timeout 200 python3 moe_lora_torch.py --warmup 2 --steps 8 2>&1 | tail -1) | tee -a "$OUT/moe-lora.jsonl"; }
done
# MOE_EXTRA: more leantrain flags for the side-by-side run (e.g. --attention-kernel auto).
# QLoRA on the full Qwen3-30B-A3B shape (random init; every expert projection NF4): plan, then 50
# steps; plan against measured, both against issue 45's 17.5 GiB.
# The issue's flags plan at 19.65 GiB (the expert adapters, their gradients and 8-bit states weigh
# 3.8 GiB on top of 16.75 GiB of NF4 base); QLORA_EXTRA's default keeps the optimizer on the host,
# the head's logits in chunks of 512 rows and the checkpointed layers' inputs in pinned host memory:
# 17.21 GiB planned. QLORA_DATA: a JSON-lines file of real text ({"text": ...}), tokenized with the
# Qwen2 tokenizer (Qwen3's vocabulary); synthetic tokens when unset.
QLORA_EXTRA=${QLORA_EXTRA---offload optimizer --loss-chunk 512 --offload-activations}
DATA="--data synthetic"
[ -n "${QLORA_DATA:-}" ] && DATA="--data $QLORA_DATA --tokenizer tests/data/tokenizers/qwen2"
Q0="--model qwen3-30b-a3b $DATA --batch 1 --seq-len 2048 --precision bf16-true --quantize nf4 \
--lora-rank 16 --lora-alpha 32 --checkpoint blocks --optimizer adamw8bit --lr ${QLORA_LR:-2e-4}"
Q="$Q0 $QLORA_EXTRA"
# QLORA_PLANS=1: only the plan the run is checked against (not the issue-flags plan or the table).
[ "${QLORA_PLANS:-3}" = 1 ] || { timeout 120 "./$BUILD/leantrain" plan $Q0 --device-type cuda --json > "$OUT/qlora-plan-issue-flags.json" 2>/dev/null &&
  python3 -c "import json,sys; print('issue flags alone plan', round(json.load(open(sys.argv[1]))['peak_allocated_bytes'] / 2**30, 3), 'GiB')" "$OUT/qlora-plan-issue-flags.json"; }
echo "qlora flags: $Q"
timeout 120 "./$BUILD/leantrain" plan $Q --device-type cuda --json > "$OUT/qlora-plan.json" 2> "$OUT/qlora-plan.err" || { echo "qlora plan failed"; tail -3 "$OUT/qlora-plan.err"; }
[ "${QLORA_PLANS:-3}" = 1 ] || { timeout 120 "./$BUILD/leantrain" plan $Q --device-type cuda > "$OUT/qlora-plan.txt" 2>&1 && head -40 "$OUT/qlora-plan.txt"; }
[ "$QLORA" = 1 ] && { timeout 560 "./$BUILD/leantrain" train $Q --device cuda --steps 50 --eval-batches 0 --log-every 5 \
  --metrics-json "$OUT/qlora-run.json" > "$OUT/qlora-run.log" 2>&1 || { echo "qlora run failed"; tail -5 "$OUT/qlora-run.log"; }; }
[ -f "$OUT/qlora-run.log" ] && { grep -m1 "in NF4" "$OUT/qlora-run.log"; grep "| loss " "$OUT/qlora-run.log" | sed -n '1p;$p'; }
python3 - "$OUT/qlora-plan.json" "$OUT/qlora-run.json" <<'PY' | tee -a "$OUT/moe-lora.jsonl"
import json, sys
GIB, TARGET = 1 << 30, 17.5
try:
    plan = json.load(open(sys.argv[1]))
except Exception as e:
    print(json.dumps({"side": "leantrain-qlora", "error": "no plan: " + str(e)}))
    sys.exit(0)
out = {"side": "leantrain-qlora", "plan_peak_allocated": plan["peak_allocated_bytes"],
       "plan_peak_gib": round(plan["peak_allocated_bytes"] / GIB, 3), "target_gib": TARGET,
       "plan_categories_at_peak": plan.get("categories_at_peak")}
try:
    run = json.load(open(sys.argv[2]))
    out.update({"peak_allocated": run["peak_allocated_bytes"], "peak_gib": round(run["peak_allocated_bytes"] / GIB, 3),
                "peak_reserved": run.get("peak_reserved_bytes"),
                "plan_minus_measured": plan["peak_allocated_bytes"] - run["peak_allocated_bytes"],
                "meets_target": run["peak_allocated_bytes"] <= TARGET * GIB,
                "tokens_per_s": round(run["steady_items_per_s"]), "categories_peak": run.get("categories_peak")})
except Exception as e:
    out["run"] = "none (QLORA=0, or the run failed: " + str(e) + ")"
    out["plan_meets_target"] = plan["peak_allocated_bytes"] <= TARGET * GIB
print(json.dumps(out))
PY
