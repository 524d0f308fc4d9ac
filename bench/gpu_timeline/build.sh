#!/usr/bin/env bash
# Builds libgpu_timeline.so (gpu_timeline.cpp) into $1 (default: bench/gpu_timeline/), against the
# CUDA toolkit's CUPTI (cupti.h; libcupti found under /usr/local/cuda at run time).
set -eu
out=${1:-$(dirname "$0")}
cuda=${CUDA_HOME:-/usr/local/cuda}
inc=$(dirname "$(find -L "$cuda/" -name cupti.h 2>/dev/null | head -1)")
lib=$(dirname "$(find -L "$cuda/" -name 'libcupti.so*' 2>/dev/null | head -1)")
g++ -std=c++17 -O2 -shared -fPIC -I"$inc" -I"$cuda/include" "$(dirname "$0")/gpu_timeline.cpp" \
  -L"$lib" -Wl,-rpath,"$lib" -lcupti -o "$out/libgpu_timeline.so"
echo "$out/libgpu_timeline.so (libcupti from $lib)"
