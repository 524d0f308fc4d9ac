#!/usr/bin/env bash
# Builds the CLI, the unit tests and the test tools with AddressSanitizer (leaks included) and
# UndefinedBehaviorSanitizer (clang, CPU only) into build-sanitize/, and runs every ctest there:
# the unit tests, and the end-to-end scripts driving the sanitized CLI. Any report fails its test.
# The same build directory holds the fuzz harnesses (scripts/fuzz.sh), so the library is built once.
# Extra arguments go to ctest (e.g. -R 'e2e\.' or -R '^unit\.'). docs/testing.md has the details.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${SANITIZE_BUILD:-build-sanitize}
command -v clang++ >/dev/null || { echo "leantrain: error: the sanitizer build needs clang++: not found (run scripts/deps.sh --sanitize)" >&2; exit 1; }
# Without MPI: OpenMPI keeps allocations past MPI_Finalize that LeakSanitizer reports as leaks
# (tests/e2e/strategies_mpi.sh then skips visibly, LT_E2E_NO_MPI; the normal build runs it).
export LT_E2E_NO_MPI=1
# One BLAS thread per test: ctest already runs one test per core (scripts/test.sh says why).
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# lld links the large instrumented binaries faster than ld.bfd (scripts/deps.sh --sanitize).
LINKER=
command -v ld.lld >/dev/null && LINKER=lld
# The unit tests' own code at -O0 (the library, which is what ASan checks, stays -O1): with the
# PCH their compile takes about half the time of -O1's; the few test files whose own code does
# the heavy work stay -O1 (LT_TEST_HOT_SOURCES in CMakeLists.txt; docs/testing.md, "CI time").
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ -DLEANTRAIN_CUDA=OFF \
  -DLEANTRAIN_SANITIZE=ON -DLEANTRAIN_FUZZ=ON -DLEANTRAIN_MPI=OFF -DLEANTRAIN_LINKER="$LINKER" \
  -DLEANTRAIN_TEST_OPT=-O0 -DLEANTRAIN_UNITY="${LEANTRAIN_UNITY:-OFF}" >/dev/null
# In CI the fuzz harnesses (scripts/fuzz.sh, next) are built here too: their compiles fill the
# cores while the large test binary links.
extra=()
[ "${CI:-}" = true ] && extra=(fuzzers)
ninja -C "$BUILD" leantrain leantrain_tests memory_report_demo "${extra[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-exitcode=86:allocator_may_return_null=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-exitcode=86:print_stacktrace=1:halt_on_error=1}
cd "$BUILD"
rc=0
ctest --output-on-failure -j "$(nproc)" "$@" || rc=$?
python3 "$OLDPWD/scripts/test_summary.py" .
exit $rc
