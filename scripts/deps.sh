#!/usr/bin/env bash
# Installs leantrain's Debian 12 dependencies (skipped when they are all present). Works as
# root, or through sudo for another user. Sourced or run by demo.sh and test.sh.
# `deps.sh --tests` adds what only the tests need: headless Chromium renders the HTML memory report,
# pgrep (procps) finds the rank a test kills, python3-jinja2 renders the chat-template references
# (tests/chat/render_reference.py), lld links the test binaries faster (build.sh uses it when present).
# `deps.sh --sanitize` adds clang and its sanitizer/libFuzzer runtimes (scripts/sanitize.sh, fuzz.sh).
set -euo pipefail
PKGS=(cmake ninja-build g++ libopenblas-dev nlohmann-json3-dev libcli11-dev libgtest-dev zlib1g-dev libpcre2-dev liburing-dev
  libopenmpi-dev openmpi-bin
  libicu72
  dataset-fashion-mnist fortunes)
for arg in "$@"; do
  case "$arg" in
    --tests) PKGS+=(chromium procps python3-jinja2 lld) ;;
    --sanitize) PKGS+=(clang libclang-rt-14-dev lld) ;;
    *) echo "leantrain: error: deps.sh: unknown option '$arg' (use --tests and/or --sanitize)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v python3 >/dev/null || missing+=(python3)  # the e2e tests edit safetensors files with it
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null; then
    SUDO=(sudo)
  else
    echo "leantrain: error: missing Debian packages: ${missing[*]}: not root and no sudo (run as root or install them)" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
