#!/usr/bin/env bash
# Runs every libFuzzer harness of tests/fuzz/harnesses.txt (or the ones named) for a bounded
# time, and fails when any of them finds a crash, a leak, undefined behaviour, a timeout (10 s
# per input) or an out-of-memory (2 GiB). Builds them first (clang, ASan + UBSan, CPU only).
#   scripts/fuzz.sh [SECONDS_PER_HARNESS] [NAME...]      default: 30 seconds each, all harnesses
# Environment:
#   FUZZ_RUNS=N    stop each harness after N inputs instead (SECONDS is then only a safety limit; 0: none)
#   FUZZ_JOBS=J    harnesses run J at a time (default: the number of cores)
#   FUZZ_NICE=K    their nice level (default 0; long runs beside other work: 19)
#   FUZZ_BUILD=DIR the build directory (default build-sanitize, shared with scripts/sanitize.sh)
#   FUZZ_OUT=DIR   logs and crash inputs (cleared at the start), and the grown corpora (kept: a
#                  later run continues from them); default BUILD/fuzz-runs
# Each harness starts from its seeds (tests/fuzz/corpus/NAME) and replays tests/fuzz/regressions/NAME;
# what it finds is under FUZZ_OUT/artifacts. docs/testing.md explains the harnesses and a long run.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
shift || true
BUILD=${FUZZ_BUILD:-build-sanitize}
OUT=${FUZZ_OUT:-$BUILD/fuzz-runs}
JOBS=${FUZZ_JOBS:-$(nproc)}
RUNS=${FUZZ_RUNS:-}

command -v clang++ >/dev/null || { echo "leantrain: error: fuzzing needs clang++: not found (run scripts/deps.sh --sanitize)" >&2; exit 1; }
LINKER=
command -v ld.lld >/dev/null && LINKER=lld
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ -DLEANTRAIN_CUDA=OFF \
  -DLEANTRAIN_SANITIZE=ON -DLEANTRAIN_FUZZ=ON -DLEANTRAIN_LINKER="$LINKER" >/dev/null
ninja -C "$BUILD" fuzzers

mapfile -t LINES < <(grep -E '^[a-z]' tests/fuzz/harnesses.txt)
if [ $# -gt 0 ]; then
  want=" $* "
  sel=()
  for l in "${LINES[@]}"; do [[ "$want" == *" ${l%% *} "* ]] && sel+=("$l"); done
  [ ${#sel[@]} = $# ] || { echo "leantrain: error: unknown harness in '$*': see tests/fuzz/harnesses.txt" >&2; exit 2; }
  LINES=("${sel[@]}")
fi

rm -rf "$OUT/logs" "$OUT/artifacts" "$OUT/results"
mkdir -p "$OUT/logs" "$OUT/artifacts" "$OUT/results" "$OUT/corpus"
OUT=$(cd "$OUT" && pwd)
# The harnesses write their input files under TMPDIR: tmpfs when there is one.
SCRATCH_PARENT=/tmp
[ -d /dev/shm ] && [ -w /dev/shm ] && SCRATCH_PARENT=/dev/shm
export TMPDIR
TMPDIR=$(mktemp -d "$SCRATCH_PARENT/leantrain-fuzz.XXXXXX")
trap 'rm -rf "$TMPDIR"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

run_one() {
  local name=$1 max_len=$2
  local corpus="$OUT/corpus/$name" log="$OUT/logs/$name.log"
  mkdir -p "$corpus"
  local args=(-timeout=10 -rss_limit_mb=2048 -max_len="$max_len" -print_final_stats=1
              -artifact_prefix="$OUT/artifacts/$name-")
  if [ -n "$RUNS" ]; then args+=(-runs="$RUNS" -max_total_time="$SECONDS_EACH"); else args+=(-max_total_time="$SECONDS_EACH"); fi
  [ -f "tests/fuzz/$name.dict" ] && args+=(-dict="tests/fuzz/$name.dict")
  local dirs=("$corpus" "tests/fuzz/corpus/$name")
  [ -d "tests/fuzz/regressions/$name" ] && dirs+=("tests/fuzz/regressions/$name")
  local start rc=0
  start=$(date +%s.%N)
  nice -n "${FUZZ_NICE:-0}" "$BUILD/fuzz/$name" "${args[@]}" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  local secs execs
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "$name ${execs:-?} $secs $rc" >"$OUT/results/$name"
}

for line in "${LINES[@]}"; do
  read -r name max_len <<<"$line"
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  run_one "$name" "$max_len" &
done
wait

failed=0
printf '%-16s %12s %9s %9s  %s\n' harness executions seconds exec/s result
for line in "${LINES[@]}"; do
  name=${line%% *}
  read -r _ execs secs rc <"$OUT/results/$name"
  rate=$(awk -v e="$execs" -v s="$secs" 'BEGIN { if (e ~ /^[0-9]+$/ && s > 0) printf "%d", e / s; else print "?" }')
  if [ "$rc" = 0 ]; then result=ok; else
    result="FAILED (exit $rc): $(grep -m1 -E '^==[0-9]+==ERROR|runtime error|^fuzz: |libFuzzer: (deadly|timeout|out-of-memory)|terminate called' "$OUT/logs/$name.log" || echo 'see the log')"
    failed=1
  fi
  printf '%-16s %12s %9.1f %9s  %s\n' "$name" "$execs" "$secs" "$rate" "$result"
done
if [ $failed = 1 ]; then
  echo "fuzzing failed: reports in $OUT/logs, the inputs in $OUT/artifacts (replay: $BUILD/fuzz/NAME FILE)" >&2
  for f in "$OUT"/artifacts/*; do [ -e "$f" ] && echo "  $f" >&2; done
  exit 1
fi
