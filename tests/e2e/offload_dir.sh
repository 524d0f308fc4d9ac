# --offload-dir (the disk tier of --offload optimizer, ZeRO-Infinity's NVMe offload): the state of
# the 16-bit parameters beyond --host-memory-limit lives in an unnamed file of the directory, read
# and written a chunk at a time. On cpu the loss curve is bitwise that of --offload optimizer
# alone, with io_uring and with the threads engine, through save and resume; plan predicts the
# disk bytes and the pinned-host and device peaks to the byte; the directory is left as it was;
# every misuse is one line.
source "$(dirname "$0")/common.bash" "$@"
GPT=(--model gpt2-tiny --dim 32 --depth 2 --heads 2 --batch 4 --seq-len 32 --eval-batches 1 --steps 4 --log-every 1
  --precision bf16-true --device cpu)
losses() { grep '"loss"' "$1" | sed 's/, "seconds": [0-9.e+-]*//'; }
mkdir -p "$WORK/nvme"

expect_error 2 "^leantrain: error: --offload-dir with --offload none: .*\(add --offload optimizer\)" \
  "$LT" train "${GPT[@]}" --offload-dir "$WORK/nvme"
expect_error 2 "^leantrain: error: --offload-dir with --offload params: parameters on disk are not built yet" \
  "$LT" train "${GPT[@]}" --checkpoint blocks --offload params --offload-dir "$WORK/nvme"
expect_error 2 "^leantrain: error: --offload-dir with --optimizer adamw8bit" \
  "$LT" plan "${GPT[@]}" --optimizer adamw8bit --offload optimizer --offload-dir "$WORK/nvme"
expect_error 2 "^leantrain: error: --host-memory-limit without --offload-dir" \
  "$LT" train "${GPT[@]}" --offload optimizer --host-memory-limit 1GiB
expect_error 2 "^leantrain: error: --host-memory-limit" \
  "$LT" train "${GPT[@]}" --offload optimizer --offload-dir "$WORK/nvme" --host-memory-limit lots
expect_error 1 "^leantrain: error: --offload-dir $WORK/missing: cannot create the optimizer's state file" \
  "$LT" train "${GPT[@]}" --offload optimizer --offload-dir "$WORK/missing"
echo "a user's notes" > "$WORK/notes.txt"
expect_error 1 "^leantrain: error: --offload-dir $WORK/notes.txt: cannot create the optimizer's state file" \
  "$LT" train "${GPT[@]}" --offload optimizer --offload-dir "$WORK/notes.txt"
if [ "$(cat "$WORK/notes.txt")" = "a user's notes" ]; then ok; else fail "a file given as --offload-dir was changed"; fi
expect_error 1 "^leantrain: error: --host-memory-limit 4.0 KiB: the disk tier's I/O windows alone take" \
  "$LT" train "${GPT[@]}" --offload optimizer --offload-dir "$WORK/nvme" --host-memory-limit 4KiB

# The reference: the state in host memory.
expect_ok "$LT" train "${GPT[@]}" --offload optimizer --metrics "$WORK/host.jsonl"
# Everything on disk, io_uring (where the kernel allows it) and threads.
expect_ok "$LT" train "${GPT[@]}" --offload optimizer --offload-dir "$WORK/nvme" --metrics "$WORK/disk.jsonl" \
  --metrics-json "$WORK/disk.json"
expect_grep "Disk \(--offload-dir\)" "$WORK/out" "the memory table"
if [ "$(losses "$WORK/host.jsonl" | wc -l)" = 4 ] && cmp -s <(losses "$WORK/host.jsonl") <(losses "$WORK/disk.jsonl"); then
  ok; else fail "--offload-dir changed the loss curve"; diff <(losses "$WORK/host.jsonl") <(losses "$WORK/disk.jsonl") | head >&2; fi
LEANTRAIN_DISK_IO=threads expect_ok "$LT" train "${GPT[@]}" --offload optimizer --offload-dir "$WORK/nvme" \
  --metrics "$WORK/threads.jsonl"
if cmp -s <(losses "$WORK/host.jsonl") <(losses "$WORK/threads.jsonl"); then ok; else
  fail "--offload-dir with the threads engine changed the loss curve"; fi
if [ -z "$(ls -A "$WORK/nvme")" ]; then ok; else fail "--offload-dir left files behind: $(ls -A "$WORK/nvme")"; fi

# A limit that keeps part of the state on the host: the same curve, and the host's optimizer
# state (windows included) within the limit.
LIMIT=460000
expect_ok "$LT" train "${GPT[@]}" --offload optimizer --offload-dir "$WORK/nvme" --host-memory-limit $LIMIT \
  --metrics "$WORK/limit.jsonl" --metrics-json "$WORK/limit.json"
if cmp -s <(losses "$WORK/host.jsonl") <(losses "$WORK/limit.jsonl"); then ok; else
  fail "--host-memory-limit changed the loss curve"; fi

# plan == measured: device, pinned host (by category) and disk, with and without the limit.
for run in disk limit; do
  extra=()
  [ $run = limit ] && extra=(--host-memory-limit $LIMIT)
  expect_ok "$LT" plan "${GPT[@]}" --device-type cpu --offload optimizer --offload-dir "$WORK/nvme" "${extra[@]}" --json
  cp "$WORK/out" "$WORK/plan-$run.json"
  if python3 - "$WORK/plan-$run.json" "$WORK/$run.json" $run $LIMIT <<'PY'; then ok; else fail "--offload-dir ($run): plan != measured"; fi
import json, sys
plan, run, kind, limit = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], int(sys.argv[4])
assert run["peak_disk_bytes"] > 0, run
assert plan["peak_disk_bytes"] == run["peak_disk_bytes"], (plan["peak_disk_bytes"], run["peak_disk_bytes"])
assert plan["peak_pinned_host_bytes"] == run["peak_pinned_host_bytes"], (plan["peak_pinned_host_bytes"], run["peak_pinned_host_bytes"])
assert plan["pinned_host_categories_peak"] == run["pinned_host_categories_peak"]
assert plan["peak_allocated_bytes"] == run["peak_allocated_bytes"]
if kind == "limit":  # part on the host (within the limit), part on disk
    assert 409600 < run["pinned_host_categories_peak"]["optimizer_state"] <= limit, run["pinned_host_categories_peak"]
    assert run["peak_disk_bytes"] < json.load(open(sys.argv[1].replace("limit", "disk")))["peak_disk_bytes"]
PY
done
expect_ok "$LT" plan "${GPT[@]}" --device-type cpu --offload optimizer --offload-dir "$WORK/nvme"
expect_grep "predicted peak disk" "$WORK/out" "plan's table"
# plan needs no directory: it is often run on another machine than the training.
expect_ok "$LT" plan "${GPT[@]}" --device-type cpu --offload optimizer --offload-dir /nonexistent/nvme

# Stopped after 2 steps, saved (the state read through the file's mapping), resumed with the
# state on disk again: the uninterrupted curve.
expect_ok "$LT" train "${GPT[@]}" --offload optimizer --offload-dir "$WORK/nvme" --stop-at 2 --save "$WORK/ck" \
  --metrics "$WORK/resumed.jsonl"
expect_ok "$LT" train --resume "$WORK/ck" --offload-dir "$WORK/nvme"
if cmp -s <(losses "$WORK/host.jsonl") <(losses "$WORK/resumed.jsonl"); then ok; else
  fail "--offload-dir: the resumed run differs from the uninterrupted one"; diff <(losses "$WORK/host.jsonl") <(losses "$WORK/resumed.jsonl") >&2; fi
finish
