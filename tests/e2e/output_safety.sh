# What leantrain writes and what it refuses to overwrite (docs/user-guide.md): --save replaces
# only a new or empty directory or a leantrain checkpoint; output files replace only regular files
# (a symlink is written through); every write is checked, stdout included; each refusal is one
# line, exit 2, before training starts.
source "$(dirname "$0")/common.bash" "$@"
cd "$WORK" || exit 1  # a binary with the bugs writes files named '-' into the current directory
# Synthetic images: nothing here reads the data, and each of the ~30 runs loading Fashion-MNIST
# (60,000 images) cost 0.4 s of CPU, seconds under ASan.
BASE=("$LT" train --data synthetic --batch 8 --eval-batches 1 --device cpu --log-every 1)
RUN=("${BASE[@]}" --steps 2)
# Commands that an unsafe binary may block in (a FIFO opened for writing) get a time limit.
T=(timeout 60)

# --- --save: a user's directory, a file, a device, a FIFO, a link to a file: refused, untouched.
mkdir "$WORK/mine" && echo precious >"$WORK/mine/notes.txt"
expect_error 2 "cannot save checkpoints to --save $WORK/mine: it is a directory that holds files but no leantrain checkpoint" \
  "${RUN[@]}" --save "$WORK/mine"
if [ "$(cat "$WORK/mine/notes.txt" 2>/dev/null)" = precious ] && [ ! -e "$WORK/mine.old" ]; then ok; else
  fail "--save into a user's directory changed it"; fi
echo precious >"$WORK/file.txt"
expect_error 2 "--save $WORK/file.txt: it is a regular file, and a checkpoint is a directory" "${RUN[@]}" --save "$WORK/file.txt"
if [ -f "$WORK/file.txt" ] && [ "$(cat "$WORK/file.txt")" = precious ]; then ok; else fail "--save replaced a regular file"; fi
# A device node of our own (never a system one: a binary with the bug would replace it).
DEV=
if mknod "$WORK/null" c 1 3 2>/dev/null; then DEV="$WORK/null"; fi
if [ -n "$DEV" ]; then
  expect_error 2 "--save $DEV: it is a character device" "${RUN[@]}" --save "$DEV"
  if [ -c "$DEV" ]; then ok; else fail "--save replaced a device node"; fi
fi
mkfifo "$WORK/fifo"
expect_error 2 "--save $WORK/fifo: it is a FIFO" "${T[@]}" "${RUN[@]}" --save "$WORK/fifo"
ln -s "$WORK/file.txt" "$WORK/link"
expect_error 2 "--save $WORK/link: it is a symlink to a regular file" "${RUN[@]}" --save "$WORK/link"
if [ -L "$WORK/link" ]; then ok; else fail "--save replaced a symlink"; fi
# A parent that is a file: found before training, not at the first save.
expect_error 2 "--save $WORK/file.txt/ck: $WORK/file.txt is a regular file, not a directory" \
  "${RUN[@]}" --save "$WORK/file.txt/ck"
if [ "$(id -u)" != 0 ]; then  # root writes anywhere
  mkdir "$WORK/ro" && chmod 555 "$WORK/ro"
  expect_error 2 "--save $WORK/ro/ck: permission denied on the directory $WORK/ro" "${RUN[@]}" --save "$WORK/ro/ck"
fi
# DIR.tmp and DIR.old that are not ours are never deleted.
mkdir "$WORK/ck.tmp" && echo precious >"$WORK/ck.tmp/notes.txt"
expect_error 2 "--save $WORK/ck: $WORK/ck.tmp is a directory that holds files but no leantrain checkpoint.*move $WORK/ck.tmp away" \
  "${RUN[@]}" --save "$WORK/ck"
echo precious >"$WORK/ck.old"
rm -rf "$WORK/ck.tmp"
expect_error 2 "--save $WORK/ck: $WORK/ck.old is a regular file" "${RUN[@]}" --save "$WORK/ck"
if [ "$(cat "$WORK/ck.old")" = precious ] && [ ! -e "$WORK/ck" ]; then ok; else fail "a refused --save wrote something"; fi
rm -f "$WORK/ck.old"

# --- --save: a new, an empty, a leantrain checkpoint (with or without the marker) are used.
mkdir "$WORK/empty"
expect_ok "${RUN[@]}" --save "$WORK/empty"
expect_grep "saved checkpoint" "$WORK/out"
if [ -f "$WORK/empty/LEANTRAIN_CHECKPOINT" ] && [ -f "$WORK/empty/trainer_state.json" ]; then ok; else
  fail "no checkpoint (with its marker) in the empty directory"; fi
expect_ok "${RUN[@]}" --save "$WORK/empty"  # again: it is ours now
rm "$WORK/empty/LEANTRAIN_CHECKPOINT"       # a checkpoint saved before the marker existed
expect_ok "${RUN[@]}" --save "$WORK/empty"
# An interrupted save's staging directory (it has the marker) is cleaned up.
mkdir "$WORK/empty.tmp" && printf 'leantrain-checkpoint-1\nkind: checkpoint\n' >"$WORK/empty.tmp/LEANTRAIN_CHECKPOINT" && touch "$WORK/empty.tmp/model.safetensors"
expect_ok "${RUN[@]}" --save "$WORK/empty"
if [ ! -e "$WORK/empty.tmp" ] && [ ! -e "$WORK/empty.old" ]; then ok; else fail "the stale staging directory was left"; fi
# A symlink to a checkpoint directory: the directory is replaced, the link stays a link.
ln -s "$WORK/empty" "$WORK/cklink"
expect_ok "${RUN[@]}" --save "$WORK/cklink"
if [ -L "$WORK/cklink" ] && [ -f "$WORK/empty/trainer_state.json" ]; then ok; else fail "--save through a symlink"; fi

# --- Resuming a copied checkpoint saves into the copy, not into the original's stored --save.
cp -r "$WORK/empty" "$WORK/copy"
expect_ok "$LT" train --steps 4 --resume "$WORK/copy"
expect_grep "saved checkpoint $WORK/copy \(step 4\)" "$WORK/out"
expect_grep '"step": 2' "$WORK/empty/trainer_state.json" "the original checkpoint after resuming its copy"
expect_grep '"step": 4' "$WORK/copy/trainer_state.json" "the copy after resuming it"

# --- Output files: devices, FIFOs, directories, links to them are refused before the run.
if [ -n "$DEV" ]; then
  expect_error 2 "cannot write --metrics $DEV: it is a character device" "${RUN[@]}" --metrics "$DEV"
  ln -s "$DEV" "$WORK/devlink"
  expect_error 2 "cannot write --memory-snapshot $WORK/devlink: it is a symlink to a character device" \
    "${RUN[@]}" --memory-snapshot "$WORK/devlink"
  expect_error 2 "cannot write --memory-report $DEV: it is a character device" \
    "$LT" plan --model gpt2-tiny --data synthetic --batch 2 --seq-len 16 --memory-report "$DEV"
  expect_error 2 "cannot write --json $DEV: it is a character device" \
    "$LT" profile --model gpt2-tiny --data synthetic --batch 2 --seq-len 16 --device cpu --json "$DEV"
  if [ -c "$DEV" ] && [ -L "$WORK/devlink" ]; then ok; else fail "an output replaced a device node or a link"; fi
fi
expect_error 2 "cannot write --metrics $WORK/fifo: it is a FIFO" "${T[@]}" "${RUN[@]}" --metrics "$WORK/fifo"
expect_error 2 "cannot write --metrics-json $WORK/fifo: it is a FIFO" "${T[@]}" "${RUN[@]}" --metrics-json "$WORK/fifo"
expect_error 2 "cannot write --memory-report $WORK: it is a directory" "${RUN[@]}" --memory-report "$WORK"
ln -s "$WORK/fifo" "$WORK/fifolink"
expect_error 2 "cannot write --memory-snapshot $WORK/fifolink: it is a symlink to a FIFO" \
  "${T[@]}" "${RUN[@]}" --memory-snapshot "$WORK/fifolink"
mkfifo "$WORK/snap.pickle"  # the pickle written beside --memory-snapshot PATH.json is checked too
expect_error 2 "cannot write --memory-snapshot $WORK/snap.pickle: it is a FIFO" \
  "${T[@]}" "${RUN[@]}" --memory-snapshot "$WORK/snap.json"
expect_error 2 "cannot write --memory-report -: this output cannot go to standard output" "${RUN[@]}" --memory-report -
# A symlink to a regular file is written through; the link stays.
echo old >"$WORK/m.jsonl" && ln -s "$WORK/m.jsonl" "$WORK/mlink"
expect_ok "${RUN[@]}" --metrics "$WORK/mlink" --metrics-json "$WORK/mlink.json"
if [ -L "$WORK/mlink" ] && grep -q '"step": 2' "$WORK/m.jsonl" && ! grep -q old "$WORK/m.jsonl"; then ok; else
  fail "--metrics through a symlink"; fi
# "-" is stdout for the JSON-lines outputs.
expect_ok "${RUN[@]}" --metrics - --metrics-json -
expect_grep '^\{"step": 2, "loss"' "$WORK/out" "--metrics - on stdout"
expect_grep '^\{"device": "cpu", "peak_allocated_bytes"' "$WORK/out" "--metrics-json - on stdout"

# --- Write errors: a file that cannot grow (ulimit -f, as on a full disk) and a full stdout.
limited() { (trap '' XFSZ; ulimit -f 2; exec "$@" >/dev/null); }
expect_error 1 "cannot write '$WORK/big.jsonl': File too large" \
  limited "${BASE[@]}" --steps 40 --metrics "$WORK/big.jsonl"
if [ -w /dev/full ]; then
  expect_error 1 "cannot write to standard output" bash -c '"$@" >/dev/full' _ "${RUN[@]}"
  expect_error 1 "cannot write to standard output: No space left on device" bash -c '"$@" >/dev/full' _ "${RUN[@]}" --metrics -
fi

# --- The out-of-memory message suggests a `leantrain plan` command that the parser accepts.
expect_error 1 "out of memory on cpu.*run \`leantrain plan" \
  "$LT" train --model gpt2-tiny --data synthetic --dim 200000 --heads 1 --device cpu --steps 1 --lr 0.00123456789
CMD=$(sed -n 's/.*run `\(leantrain plan [^`]*\)`.*/\1/p' "$WORK/err")
case "$CMD" in *e+*) fail "the suggested command has an exponent: $CMD" ;; *) ok ;; esac
read -ra WORDS <<<"$CMD"  # split on blanks, no shell evaluation of what the binary printed
rc=0
(cd "$WORK" && "${T[@]}" "$LT" "${WORDS[@]:1}") >"$WORK/plan.out" 2>&1 </dev/null || rc=$?
if [ "$rc" != 2 ] && [ -n "$CMD" ]; then ok; else fail "the suggested plan command is refused (exit $rc): $CMD"; cat "$WORK/plan.out" >&2; fi
finish
