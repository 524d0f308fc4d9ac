#!/usr/bin/env bash
# SGD settings for the accuracy ladder, chosen by measurement: vit-tiny on Fashion-MNIST with the
# accuracy ladder's problem (batch 256, EPOCHS epochs, 10% warmup then cosine to 0, no weight
# decay, seed 0), one run per SGD setting and precision, plus the AdamW reference (rung 1).
# Prints one line per run: the setting, the precision, the test accuracy on the 10,000 images.
#
#   BUILD=build-gpu OUT=/tmp/sgd bash bench/sgd_sweep.sh       # about 4 s per run on an H200
#
# SETTINGS: one set of SGD flags per line (default below); PRECISIONS: "32-true" and bf16-true
# with stochastic rounding (the ladder's rungs 6-8 use bf16-true, without accumulation here:
# accumulation is what the ladder itself tests).
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/leantrain-sgd-sweep}
EPOCHS=${EPOCHS:-4}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
LT=./$BUILD/leantrain
[ -x "$LT" ] || { echo "sgd_sweep.sh: no $LT (set BUILD)" >&2; exit 2; }
DEVICE=${DEVICE:-cuda}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
[ -d "$DATA" ] || DATA=gpu-carry/fashion-mnist
SETTINGS=${SETTINGS:-"--lr 0.2
--lr 0.2 --nesterov
--lr 0.3 --nesterov
--lr 0.2 --clip 1
--lr 0.3 --clip 1
--lr 0.2 --nesterov --clip 1
--lr 0.3 --nesterov --clip 1
--lr 0.4 --nesterov --clip 1"}
PRECISIONS=${PRECISIONS:-"32-true|bf16-true --stochastic-rounding"}
run() {  # name, flags...: prints the final test accuracy
  local name=$1
  shift
  # shellcheck disable=SC2068
  timeout 120 "$LT" train --model vit-tiny --data "$DATA" --device "$DEVICE" --seed 0 --epochs "$EPOCHS" --batch 256 \
    --weight-decay 0 --warmup=-1 --schedule cosine --min-lr-ratio 0 --eval-every 0 $@ \
    --metrics "$OUT/$name.jsonl" </dev/null >"$OUT/$name.log" 2>&1 || { echo "failed: $(tail -1 "$OUT/$name.log")"; return; }
  python3 -c "import json,sys; e=[json.loads(l) for l in open(sys.argv[1]) if 'eval_accuracy' in l][-1]; print('%.2f%%' % (100*e['eval_accuracy']))" "$OUT/$name.jsonl"
}
echo "sgd sweep: $DEVICE, vit-tiny, batch 256, $EPOCHS epochs, commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
echo "adamw lr 2e-3 | 32-true | $(run adamw --precision 32-true --optimizer adamw --lr 2e-3)"
i=0
while read -r setting; do
  [ -n "$setting" ] || continue
  IFS='|' read -ra precs <<<"$PRECISIONS"
  for p in "${precs[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    echo "sgd momentum 0.9 $setting | $p | $(run "sgd$i" --precision $p --optimizer sgd --momentum 0.9 $setting)"
  done
done <<<"$SETTINGS"
