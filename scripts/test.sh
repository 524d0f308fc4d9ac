#!/usr/bin/env bash
# Quick start, step 2: build everything and run all tests (unit tests and the CLI's end-to-end
# scripts) with ctest, after checking that no include climbs a layer (scripts/check_layers.py).
# Installs missing Debian dependencies first. Ends with how many cases ran, passed and were
# skipped, and why (scripts/test_summary.py).
# With CI=true (.ci/run sets it) each test runs once where it is worth most: the main build
# leaves the unit-test binary out and runs the end-to-end scripts that train; then the unit tests
# and the hostile-input scripts run under ASan + UBSan (scripts/sanitize.sh), then every fuzz
# harness for FUZZ_SECONDS each (scripts/fuzz.sh; default 15). Each stage prints its time.
# docs/testing.md has the table of where each test runs.
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
[ "${CI:-}" = true ] && full=1
stage() {  # stage NAME CMD...: runs CMD, then prints NAME and its wall time
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "== $name: $((SECONDS - start)) s"
}
# ctest runs one test per core (-j nproc); OpenBLAS's own threads on top of that spin-wait for
# cores they do not get: tests/e2e/profile.sh took 121.6 s beside a busy core, 17.4 s with one
# BLAS thread (7-8 CPU seconds either way). Each test then runs its BLAS calls on one thread.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
if [ $full = 1 ]; then stage deps bash scripts/deps.sh --tests --sanitize; else bash scripts/deps.sh --tests; fi
# A clean CI build compiles the library in unity batches (CMakeLists.txt, LEANTRAIN_UNITY).
[ $full = 1 ] && export LEANTRAIN_UNITY=${LEANTRAIN_UNITY:-ON}
# CI has no GPU: its kernels are compiled to PTX only (no ptxas), a check of the CUDA code in about
# 0.6x of the time; a GPU machine's build (scripts/build.sh alone) makes sm_90 code.
[ $full = 1 ] && export LEANTRAIN_CUDA_ARCH=${LEANTRAIN_CUDA_ARCH:-90-virtual}
stage "layer check (src/layers.txt)" python3 scripts/check_layers.py
# With CI=true the unit tests run once, in the sanitized build below, so the main build leaves
# their binary out (the library, CLI, tools and CUDA kernels are all still compiled).
build_targets=()
[ $full = 1 ] && build_targets=(all_but_unit_tests)
stage build bash scripts/build.sh "${build_targets[@]}"
# ctest says "100% passed" even when GoogleTest skipped cases inside a shard (the CUDA ones on a
# machine without a GPU): test_summary.py counts them and gives the reasons, pass or fail.
# With CI=true each test runs once where it is worth most (the labels in CMakeLists.txt, the table
# in docs/testing.md): the end-to-end scripts labelled `main` here; the unit tests and the scripts
# labelled `sanitized` (hostile and damaged input) under ASan + UBSan below.
select=()
[ $full = 1 ] && select=(-L '^main$')
stage tests bash -c 'cd build && { ctest --output-on-failure -j "$(nproc)" "$@"; rc=$?; python3 ../scripts/test_summary.py .; exit $rc; }' _ "${select[@]}"
if [ $full = 1 ]; then
  stage "build and tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-sanitize/)" bash scripts/sanitize.sh -L '^(unit|sanitized)$'
  stage "fuzz harnesses, ${FUZZ_SECONDS:-15} s each" bash scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
fi
