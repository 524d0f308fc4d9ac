#!/usr/bin/env bash
# Puts `leantrain` on PATH: installs the Debian dependencies (scripts/deps.sh), builds the CLI
# (scripts/build.sh: CUDA when nvcc is found; LEANTRAIN_CUDA=OFF skips it) and copies it to
# PREFIX/bin (default /usr/local/bin) with `cmake --install`, through sudo when that directory is
# not writable. Then `leantrain --version` works from anywhere.
#   scripts/install.sh                 # /usr/local/bin/leantrain
#   PREFIX=$HOME/.local scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
bash scripts/deps.sh
bash scripts/build.sh leantrain
SUDO=()
if ! { mkdir -p "$PREFIX/bin" 2>/dev/null && [ -w "$PREFIX/bin" ]; }; then
  command -v sudo >/dev/null || { echo "leantrain: error: $PREFIX/bin is not writable and there is no sudo (run as root, or set PREFIX=\$HOME/.local)" >&2; exit 1; }
  SUDO=(sudo)
fi
"${SUDO[@]}" cmake --install build --prefix "$PREFIX" >/dev/null
echo "installed $PREFIX/bin/leantrain"
case ":$PATH:" in
  *":$PREFIX/bin:"*) ;;
  *) echo "note: $PREFIX/bin is not on PATH (add it: export PATH=\"$PREFIX/bin:\$PATH\")" ;;
esac
