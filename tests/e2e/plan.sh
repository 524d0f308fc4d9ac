# leantrain plan: the report and its JSON, the 7B-parameter plan (and budget search) in under a
# minute with no weights in memory, the budget search, and one-line errors for bad plan flags.
source "$(dirname "$0")/common.bash" "$@"
DATA=$(cd "$(dirname "$0")/../data" && pwd)

# A small ViT on synthetic images: the report names every line it promises.
expect_ok "$LT" plan --model vit-tiny --data synthetic --batch 8 --steps 2
for want in "predicted peak allocated" "predicted peak reserved" "peak reached during: (step|evaluation|model)" \
            "optimizer_state" "CUDA context" "total device memory needed"; do
  expect_grep "$want" "$WORK/out" "plan report"
done

# JSON: reserved >= allocated, total = reserved + the default context (527 + 2 MiB).
expect_ok "$LT" plan --model vit-tiny --data synthetic --batch 8 --steps 2 --json
python3 - "$WORK/out" <<'PY' || fail "plan --json values"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["peak_reserved_bytes"] >= j["peak_allocated_bytes"] > 0, j
assert j["total_needed_bytes"] == j["peak_reserved_bytes"] + 529 * 2**20, j
assert j["workspace_bytes"] == 32 * 2**20, j
assert sum(j["categories_at_peak"].values()) == j["peak_allocated_bytes"], j
PY
expect_ok "$LT" plan --model vit-tiny --data synthetic --batch 8 --device-type cpu --json
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['context_bytes']==0 and j['workspace_bytes']==0, j" "$WORK/out" \
  || fail "cpu plan has no context and no workspace"

# 7B-parameter GPT-2 shape (n_embd 4096, 32 layers, vocab 32000, context 2048): under a minute.
start=$(date +%s)
expect_ok "$LT" plan --config "$DATA/gpt2-7b/config.json" --data synthetic --batch 1 --seq-len 2048 --steps 2 --json
took=$(( $(date +%s) - start ))
[ "$took" -lt 60 ] && ok || fail "7B plan took ${took}s (limit 60s)"
python3 - "$WORK/out" <<'PY' || fail "7B plan values"
import json, sys
j = json.load(open(sys.argv[1]))
assert 6.5e9 < j["parameters"] < 7.0e9, j["parameters"]
# f32 parameters + gradients + two AdamW moments: at least 16 bytes per parameter.
assert j["peak_allocated_bytes"] > 16 * j["parameters"], j
PY
echo "7B plan: ${took}s"

# Budget: generous picks a cheap config; impossible is one clear line naming the closest need.
expect_ok "$LT" plan --model vit-tiny --data synthetic --batch 8 --budget 80GiB
expect_grep "<- chosen" "$WORK/out" "budget table"
expect_grep "^  leantrain train " "$WORK/out" "chosen command line"
for col in allocated reserved need fits time recompute; do expect_grep "$col" "$WORK/out" "budget table column $col"; done
expect_error 1 "no configuration fits in 1\.00 MiB: the closest candidate needs" \
  "$LT" plan --model vit-tiny --data synthetic --batch 8 --budget 1MiB

# Tight (cpu, exact bytes): a checkpoint set from the per-module order; the chosen command line
# runs as printed, and --json carries the candidates and the order.
expect_ok "$LT" plan --model vit-tiny --data synthetic --batch 64 --device-type cpu --json
need=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['total_needed_bytes'])" "$WORK/out")
expect_ok "$LT" plan --model vit-tiny --data synthetic --batch 64 --device-type cpu --budget $((need - 1)) --json
python3 - "$WORK/out" "$need" > "$WORK/cmd" <<'PY' || fail "tight budget json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["total_needed_bytes"] <= int(sys.argv[2]) - 1, j["total_needed_bytes"]
chosen = [c for c in j["candidates"] if c["chosen"]]
assert len(chosen) == 1 and chosen[0]["fits"], chosen
assert chosen[0]["total_needed_bytes"] == j["total_needed_bytes"], chosen
assert all(k in chosen[0] for k in ("peak_allocated_bytes", "peak_reserved_bytes", "relative_time", "recompute_flops"))
assert j["checkpoint_order"] and j["checkpoint_order"][0]["saved_bytes"] > 0, j["checkpoint_order"][:2]
print(j["command"])
PY
cmd=$(cat "$WORK/cmd")
echo "chosen: $cmd"
eval "$LT ${cmd#leantrain } --steps 1 --eval-batches 1 --device cpu" > "$WORK/run.log" 2>&1 && ok || fail "the chosen command line runs: $cmd"

# The 7B config under a budget that needs checkpointing and a leaner state: still under a minute.
start=$(date +%s)
expect_ok "$LT" plan --config "$DATA/gpt2-7b/config.json" --data synthetic --batch 1 --seq-len 2048 --precision bf16-true \
  --budget 40GiB
took=$(( $(date +%s) - start ))
[ "$took" -lt 60 ] && ok || fail "7B budget search took ${took}s (limit 60s)"
expect_grep "<- chosen" "$WORK/out" "7B budget table"
echo "7B budget search: ${took}s"

expect_error 2 "--budget 8XB: not a size" "$LT" plan --model vit-tiny --budget 8XB
expect_error 2 "--context-bytes lots: not a size" "$LT" plan --model vit-tiny --data synthetic --context-bytes lots
expect_error 2 "--device-type tpu" "$LT" plan --model vit-tiny --data synthetic --device-type tpu
expect_error 2 "unknown flag '--bogus'" "$LT" plan --bogus
finish
