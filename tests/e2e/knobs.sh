# The LEANTRAIN_* knobs (src/core/knobs.cpp): `leantrain knobs` lists them; an unknown name or a
# malformed value is one line and exit 2 before anything runs; a run names the knobs it was given
# in its header and in --metrics-json.
source "$(dirname "$0")/common.bash" "$@"

expect_ok "$LT" knobs
for k in LEANTRAIN_GEMM_GELU LEANTRAIN_PEER_CHUNK_MB LEANTRAIN_PEER_REDUCE LEANTRAIN_DISK_IO LEANTRAIN_CUDA; do
  expect_grep "^  $k " "$WORK/out" "leantrain knobs"
done
LEANTRAIN_PEER_CHUNK_MB=50 expect_ok "$LT" knobs
expect_grep "^  LEANTRAIN_PEER_CHUNK_MB .* \* set: 50" "$WORK/out" "leantrain knobs (one set)"

RUN=(train --steps 2 --batch 16 --eval-batches 1 --device cpu)
expect_error 2 "environment variable LEANTRAIN_GEMM_GELUE: leantrain has no such knob" env LEANTRAIN_GEMM_GELUE=0 "$LT" "${RUN[@]}"
expect_error 2 "LEANTRAIN_PEER_CHUNK_MB='25MB': not a whole number .*\[1, 1024\]" env LEANTRAIN_PEER_CHUNK_MB=25MB "$LT" "${RUN[@]}"
expect_error 2 "LEANTRAIN_GEMM_GELU='2': not an on/off value" env LEANTRAIN_GEMM_GELU=2 "$LT" plan --model gpt2-tiny --data synthetic
expect_error 2 "LEANTRAIN_DISK_IO='aio': not one of uring\|threads" env LEANTRAIN_DISK_IO=aio "$LT" "${RUN[@]}"
# The knobs that change memory or that users need are flags now (the plan reads them the same way).
expect_error 2 "environment variable LEANTRAIN_BUCKET_MB: it is a flag now.*--bucket-mb" env LEANTRAIN_BUCKET_MB=50 "$LT" "${RUN[@]}"
expect_error 2 "--bucket-mb 0 is out of range" "$LT" "${RUN[@]}" --bucket-mb 0
expect_error 2 "--fsdp-gather bf8: the choices are compute or f32" "$LT" "${RUN[@]}" --fsdp-gather bf8

# Defaults, and the build script's variable, say nothing; a changed knob is in the header and the JSON.
LEANTRAIN_GEMM_GELU=1 LEANTRAIN_CUDA=OFF expect_ok "$LT" "${RUN[@]}" --metrics-json "$WORK/plain.json"
if grep -q '^knobs:' "$WORK/out"; then fail "a knobs line with every knob at its default"; else ok; fi
expect_grep '"knobs": \{\}' "$WORK/plain.json" "metrics JSON"
LEANTRAIN_GEMM_GELU=off LEANTRAIN_DISK_IO=threads expect_ok "$LT" "${RUN[@]}" --metrics-json "$WORK/knobs.json"
expect_grep "^knobs: LEANTRAIN_GEMM_GELU=0, LEANTRAIN_DISK_IO=threads$" "$WORK/out" "run header"
expect_grep '"knobs": \{"LEANTRAIN_GEMM_GELU": "0", "LEANTRAIN_DISK_IO": "threads"\}' "$WORK/knobs.json" "metrics JSON"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$WORK/knobs.json" && ok || fail "metrics JSON does not parse"
finish
