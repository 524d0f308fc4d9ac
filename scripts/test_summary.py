#!/usr/bin/env python3
"""Prints what ctest's "100% tests passed" does not say: how many GoogleTest cases ran inside the
unit-test shards, how many were skipped, and why (e.g. the CUDA cases on a machine without a GPU).

Reads BUILD/Testing/Temporary/LastTest.log, where ctest keeps every test's output.
Usage: scripts/test_summary.py [BUILD]   (default: build)
"""
import collections
import os
import re
import sys

build = sys.argv[1] if len(sys.argv) > 1 else "build"
log_path = os.path.join(build, "Testing", "Temporary", "LastTest.log")
try:
    with open(log_path, errors="replace") as f:
        log = f.read()
except OSError as e:
    print(f"leantrain: error: test summary: cannot read {log_path}: {e.strerror} (run ctest in {build} first)", file=sys.stderr)
    sys.exit(1)

# ctest writes each test as "N/M Testing: NAME" ... "Test Passed." / "Test Failed." / skipped.
entries = re.split(r"^\d+/\d+ Testing: ", log, flags=re.M)[1:]
count = lambda m: int(m.group(1)) if m else 0
gt = collections.Counter()
reasons = collections.Counter()
e2e = collections.Counter()
for entry in entries:
    name = entry.split("\n", 1)[0].strip()
    if name.startswith("unit."):
        gt["shards"] += 1
        gt["run"] += count(re.search(r"^\[=+\] (\d+) tests? from \d+ test suites? ran", entry, re.M))
        gt["passed"] += count(re.search(r"^\[  PASSED  \] (\d+) tests?", entry, re.M))
        gt["skipped"] += count(re.search(r"^\[  SKIPPED \] (\d+) tests?", entry, re.M))
        gt["failed"] += count(re.search(r"^\[  FAILED  \] (\d+) tests?, listed below", entry, re.M))
        # A skip prints "file:line: Skipped" and then the reason given to GTEST_SKIP().
        for m in re.finditer(r": Skipped\n(.*)\n", entry):
            reasons[m.group(1).strip() or "(no reason given)"] += 1
    else:
        skip = re.search(r"^SKIP: (.*)$", entry, re.M)
        if skip:
            e2e["skipped"] += 1
            reasons[f"{name}: {skip.group(1).strip()}"] += 1
        elif "Test Passed." in entry:
            e2e["passed"] += 1
        else:
            e2e["failed"] += 1

print(f"== test summary ({len(entries)} ctest entries): "
      f"{gt['run']} GoogleTest cases in {gt['shards']} shards: {gt['passed']} passed, {gt['skipped']} skipped, {gt['failed']} failed; "
      f"{sum(e2e.values())} end-to-end scripts: {e2e['passed']} passed, {e2e['skipped']} skipped, {e2e['failed']} failed")
if reasons:
    print("   skipped, by reason:")
    for why, n in reasons.most_common():
        print(f"   {n:6d}  {why}")
