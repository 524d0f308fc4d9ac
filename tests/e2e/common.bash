# Shared helpers for the e2e scripts (sourced; not a test itself: ctest runs only *.sh).
# Usage in a script:  source "$(dirname "$0")/common.bash" "$@"
set -u
LT=${1:?usage: bash script.sh /path/to/leantrain}
LT=$(cd "$(dirname "$LT")" && pwd)/$(basename "$LT")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lt-e2e.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILS=0
CHECKS=0

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
ok() { CHECKS=$((CHECKS + 1)); }

# with_memory_cap KB CMD...: CMD with at most KB KiB of memory (`ulimit -v`). A binary built with
# AddressSanitizer (scripts/sanitize.sh) cannot start under an address-space limit (its shadow
# memory reserves terabytes), so there the cap is ASan's own: larger allocations fail instead.
with_memory_cap() {
  local kb=$1
  shift
  if grep -q __asan_init "$LT" 2>/dev/null; then
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1:malloc_limit_mb=$((kb / 1024)):hard_rss_limit_mb=$((kb / 1024))" "$@"
  else
    bash -c 'ulimit -v "$1"; shift; exec "$@"' _ "$kb" "$@"
  fi
}

# expect_error CODE REGEX CMD...: CMD exits with CODE and prints exactly one stderr line
# "leantrain: error: ..." matching REGEX (extended regex), and no crash text.
expect_error() {
  local code=$1 regex=$2
  shift 2
  local out="$WORK/out" err="$WORK/err" rc=0
  "$@" >"$out" 2>"$err" </dev/null || rc=$?
  # Under AddressSanitizer an allocation that fails as intended (the allocator returns null, as
  # ASAN_OPTIONS=allocator_may_return_null=1 asks) also prints this one warning; it is no error.
  sed -i '/^==[0-9]*==WARNING: AddressSanitizer failed to allocate 0x[0-9a-f]* bytes$/d' "$err"
  local lines
  lines=$(wc -l <"$err")
  if [ "$rc" != "$code" ]; then fail "exit $rc, want $code: $*"; cat "$err" >&2; return; fi
  if [ "$lines" != 1 ]; then fail "stderr has $lines lines, want 1: $*"; cat "$err" >&2; return; fi
  if ! grep -q '^leantrain: error: ' "$err"; then fail "stderr is not 'leantrain: error: ...': $*"; cat "$err" >&2; return; fi
  if ! grep -Eq -- "$regex" "$err"; then fail "stderr does not match /$regex/: $*"; cat "$err" >&2; return; fi
  if grep -Eqi 'terminate called|abort|segmentation|core dumped' "$err" "$out"; then fail "crash text: $*"; return; fi
  ok
}

# expect_ok CMD...: CMD exits 0; its stdout is left in $WORK/out, stderr in $WORK/err.
expect_ok() {
  local rc=0
  "$@" >"$WORK/out" 2>"$WORK/err" </dev/null || rc=$?
  if [ "$rc" != 0 ]; then fail "exit $rc: $*"; cat "$WORK/err" >&2; tail -5 "$WORK/out" >&2; return 1; fi
  ok
}

# expect_grep REGEX FILE [what]
expect_grep() {
  if grep -Eq -- "$1" "$2"; then ok; else fail "${3:-$2} does not match /$1/"; head -40 "$2" >&2; fi
}

finish() {
  echo "$CHECKS passed, $FAILS failed"
  [ "$FAILS" = 0 ]
}
