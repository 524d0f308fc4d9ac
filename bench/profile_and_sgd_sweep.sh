#!/usr/bin/env bash
# GPU session part: `leantrain profile` on ViT-L/16 (bf16-true, batch 16) and GPT-2 124M
# (bf16-mixed, batch 8 x 1024), then an SGD learning-rate sweep for the accuracy study
# (vit-tiny, Fashion-MNIST, full batch 256, 4 epochs, fp32 and bf16-true) so that rung 6's lr is
# chosen by measurement, not guessed. Prebuilt binaries in $BUILD; results under $OUT.
set -u
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/leantrain-profile}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
LT=./$BUILD/leantrain
timeout 200 $LT profile --config bench/configs/vit-l-16-10cls.json --data synthetic --precision bf16-true --batch 16 \
  --device cuda --modules blocks --json "$OUT/profile-vitl16.json" --svg "$OUT/profile-vitl16.svg" > "$OUT/profile-vitl16.txt" 2>/dev/null
tail -40 "$OUT/profile-vitl16.txt"
timeout 150 $LT profile --model gpt2-124m --data synthetic --batch 8 --seq-len 1024 --precision bf16-mixed --device cuda \
  --json "$OUT/profile-gpt2.json" --svg "$OUT/profile-gpt2.svg" > "$OUT/profile-gpt2.txt" 2>/dev/null
tail -45 "$OUT/profile-gpt2.txt"
DATA=/usr/share/datasets/fashion-mnist
[ -d "$DATA" ] || DATA=gpu-carry/fashion-mnist
for prec in 32-true bf16-true; do
  for lr in 0.05 0.1 0.2 0.4; do
    timeout 60 $LT train --model vit-tiny --data "$DATA" --device cuda --seed 0 --epochs 4 --batch 256 --weight-decay 0 \
      --schedule cosine --min-lr-ratio 0 --optimizer sgd --momentum 0.9 --lr $lr --precision $prec \
      --metrics "$OUT/sgd-$prec-$lr.jsonl" > "$OUT/sgd.log" 2>&1
    echo "sgd momentum 0.9 $prec lr $lr: $(grep eval_accuracy "$OUT/sgd-$prec-$lr.jsonl" | tail -1)"
  done
done
