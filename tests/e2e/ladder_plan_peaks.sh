# The ViT-L/16 memory ladder (bench/ladder.sh) by plan: the rungs whose planned peak is at most
# 0.9x PyTorch's measured peak_allocated (bench/results/ladder-vitl16-h100-5ab384c.jsonl) stay
# there. The plan is the meta dry run, equal to the GPU's measured peak to the byte; a block
# keeps 9 C per token at T = 197 since the norms, the GELU and the attention output are recomputed
# (docs/memory-model.md). Rung 5 runs with an 8 MiB GEMM workspace, rungs 7 and 8 accumulate
# breadth-first with --fused-step (no gradient buffer), as bench/ladder.sh runs them.
source "$(dirname "$0")/common.bash" "$@"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BASE="--config $ROOT/bench/configs/vit-l-16-10cls.json --data synthetic --device cuda --steps 6 --weight-decay 0 --warmup 0 --json"
# rung | flags | 0.9 x PyTorch's peak_allocated on the H100
check() {
  local rung=$1 flags=$2 limit=$3
  # shellcheck disable=SC2086
  if ! expect_ok "$LT" plan $BASE $flags; then return; fi
  local peak
  peak=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_allocated_bytes"])' "$WORK/out")
  if [ "$peak" -le "$limit" ]; then ok; else fail "rung $rung: planned peak $peak B > 0.9x PyTorch ($limit B)"; fi
}
check 1 "--precision 32-true --optimizer adamw --lr 5e-5 --batch 64" 22788274176
check 2 "--precision 16-mixed --optimizer adamw --lr 5e-5 --batch 64" 14281470720
check 3 "--precision bf16-true --optimizer adamw --lr 5e-5 --batch 64" 10886713344
check 4 "--precision bf16-true --optimizer adamw --lr 5e-5 --batch 16" 4038709248
check 5 "--precision bf16-true --optimizer adamw --lr 5e-5 --batch 16 --micro-batch 4 --gemm-workspace 8MiB" 2847715891
check 6 "--precision bf16-true --optimizer sgd --momentum 0 --lr 0.01 --batch 16 --micro-batch 4" 1745713612
check 7 "--precision bf16-true --optimizer sgd --momentum 0 --lr 0.01 --batch 16 --micro-batch 4 --checkpoint blocks --fused-step" 1241482752
check 8 "--precision bf16-true --optimizer sgd --momentum 0 --lr 0.01 --batch 16 --micro-batch 1 --checkpoint blocks --fused-step" 1179907891
finish
