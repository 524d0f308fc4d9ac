#!/usr/bin/env bash
# Quick start, step 2: build everything and run all tests (unit tests and the CLI's end-to-end
# scripts) with ctest, after checking that no include climbs a layer (scripts/check_layers.py).
# Installs missing Debian dependencies first. Ends with how many cases ran, passed and were
# skipped, and why (scripts/test_summary.py).
# With CI=true (.ci/run sets it) it then also runs the same tests under ASan + UBSan
# (scripts/sanitize.sh; each end-to-end script then runs on one build, or on both where it must:
# the labels in CMakeLists.txt) and every fuzz harness for FUZZ_SECONDS each (scripts/fuzz.sh; default 20),
# and prints how long each stage took.
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
if [ $full = 1 ]; then stage deps bash scripts/deps.sh --tests --sanitize; else bash scripts/deps.sh --tests; fi
# A clean CI build compiles the library in unity batches (CMakeLists.txt, LEANTRAIN_UNITY).
[ $full = 1 ] && export LEANTRAIN_UNITY=${LEANTRAIN_UNITY:-ON}
# CI has no GPU: its kernels are compiled to PTX only (no ptxas), a check of the CUDA code in about
# 0.6x of the time; a GPU machine's build (scripts/build.sh alone) makes sm_90 code.
[ $full = 1 ] && export LEANTRAIN_CUDA_ARCH=${LEANTRAIN_CUDA_ARCH:-90-virtual}
stage "layer check (src/layers.txt)" python3 scripts/check_layers.py
stage build bash scripts/build.sh
# ctest says "100% passed" even when GoogleTest skipped cases inside a shard (the CUDA ones on a
# machine without a GPU): test_summary.py counts them and gives the reasons, pass or fail.
# With CI=true each test runs once where it is worth most (the labels in CMakeLists.txt, the table
# in docs/testing.md): the unit tests on both builds, the end-to-end scripts labelled `main` here,
# those labelled `sanitized` (hostile and damaged input) under ASan + UBSan below.
select=()
[ $full = 1 ] && select=(-L '^(unit|main)$')
stage tests bash -c 'cd build && { ctest --output-on-failure -j "$(nproc)" "$@"; rc=$?; python3 ../scripts/test_summary.py .; exit $rc; }' _ "${select[@]}"
if [ $full = 1 ]; then
  stage "build and tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-sanitize/)" bash scripts/sanitize.sh -L '^(unit|sanitized)$'
  stage "fuzz harnesses, ${FUZZ_SECONDS:-20} s each" bash scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
