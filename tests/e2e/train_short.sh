# A short CPU run: plain progress lines (not a TTY), an eval line, final metrics and the memory
# table with allocated/reserved/peak and every category; on a pseudo-terminal, one redrawn line.
source "$(dirname "$0")/common.bash" "$@"

expect_ok "$LT" train --steps 6 --batch 16 --eval-batches 2 --log-every 2 --device cpu
OUT="$WORK/out"
for re in "^model vit-tiny: ViT" "^training 6 steps on cpu" \
  "^step 1/6 .*loss [0-9.]+ .*img/s .*ETA .*mem [0-9.]+ [KMG]?i?B \(peak" "^step 2/6" "^step 6/6 \(100%\)" \
  "^eval step 6 \| test loss [0-9.]+ \| test accuracy [0-9.]+%" \
  "^final: steps 6 \| train loss [0-9.]+ \| test loss [0-9.]+ \| test accuracy [0-9.]+% \| time" \
  "leantrain memory summary, device cpu" "^\| Allocated memory +\| +[0-9.]+ [KMG]?i?B +\| +[0-9.]+ [KMG]iB" \
  "^\| Reserved memory " "^\| Requested memory " \
  "^\|   parameter +\| +[1-9][0-9.]* [KM]iB +\| +[1-9][0-9.]* [KM]iB" "^\|   gradient " "^\|   optimizer_state +\| +[1-9][0-9.]* [KM]iB" \
  "^\|   activation +\| .*MiB \|" "^\|   input " "^\|   workspace " "^\|   other "; do
  expect_grep "$re" "$OUT" "train output"
done
if grep -q $'\r' "$OUT"; then fail "carriage returns in non-TTY output"; else ok; fi
if [ "$(grep -c '^step ' "$OUT")" = 4 ]; then ok; else fail "want 4 progress lines (1, 2, 4, 6)"; grep '^step ' "$OUT" >&2; fi

# GPT reports tokens/s.
expect_ok "$LT" train --model gpt2-tiny --steps 2 --batch 4 --seq-len 32 --eval-batches 1 --device cpu
expect_grep "^step 2/2 .*tok/s" "$WORK/out" "gpt output"
expect_grep "^eval step 2 \| validation loss [0-9.]+" "$WORK/out" "gpt output"

# On a terminal the progress is one line redrawn with \r (util-linux `script` gives a pty).
if command -v script >/dev/null; then
  script -qec "$LT train --steps 3 --batch 16 --eval-batches 1 --device cpu" "$WORK/tty.log" >/dev/null </dev/null
  if grep -q $'\r\e\[K' "$WORK/tty.log"; then ok; else fail "no in-place redraw on a TTY"; fi
  # Steps 1..3 share one physical line (redrawn), rather than one line each.
  if grep -q 'step 1/3.*step 3/3' "$WORK/tty.log"; then ok; else fail "TTY progress printed separate lines"; fi
fi
finish
