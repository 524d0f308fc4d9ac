#!/usr/bin/env bash
# Where 2-GPU ddp loses to 1 GPU (issue #13's 1.9x line): nsys kernel summaries of GPT-2 124M,
# B16 x T1024 per GPU, bf16-mixed, on 1 GPU and on rank 0 of ddp over $N GPUs, 12 steps each.
# Usage (GPU machine): BUILD=gpu-carry OUT=dir bash bench/ddp_kernel_profile.sh
set -u
BUILD=${BUILD:-build}; OUT=${OUT:-/tmp/ddp-prof}; N=${DIST_GPUS:-2}
mkdir -p "$OUT"
command -v nsys >/dev/null || PATH=$PATH:$(dirname "$(ls -d /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | tail -1)" 2>/dev/null)
command -v nsys >/dev/null || { echo "nsys not found"; ls /opt/nvidia; exit 0; }
export NCCL_NVLS_ENABLE=0
T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps 12 --log-every 6 --eval-batches 1 --device cuda"
timeout 200 nsys profile -q -t cuda,nvtx -o "$OUT/one" -f true "./$BUILD/leantrain" train $T --batch 16 > "$OUT/one.log" 2>&1
timeout 250 nsys profile -q -t cuda,nvtx -o "$OUT/ddp" -f true "./$BUILD/leantrain" train $T --batch $((16 * N)) --devices $N --strategy ddp > "$OUT/ddp.log" 2>&1
for f in one ddp; do
  echo "== $f: top kernels (nsys cuda_gpu_kern_sum)"
  nsys stats -q -r cuda_gpu_kern_sum -f csv "$OUT/$f.nsys-rep" 2>/dev/null | python3 -c "
import csv, sys
rows = list(csv.DictReader(sys.stdin))
tot = sum(float(r['Total Time (ns)']) for r in rows)
print('kernels total ms %.1f' % (tot / 1e6))
for r in rows[:25]: print('%8.1f ms %6s %5.1f%%  %s' % (float(r['Total Time (ns)']) / 1e6, r['Instances'], float(r['Time (%)']), r['Name'][:110]))
"
done
ls "$OUT"
