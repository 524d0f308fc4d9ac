# Sourced by the one-call device scripts (bench/issue*_call*.sh): BUILD and OUT with their
# defaults, OUT created, the GPU named, and el() printing the seconds since the start with a label.
#   CALL_OUT_DEFAULT=/tmp/callN; source bench/call_lib.sh
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-${CALL_OUT_DEFAULT:-/tmp/call}}
export BUILD
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
