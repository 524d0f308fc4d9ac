# Usage errors: one line on stderr, exit code 2, before any work is done.
source "$(dirname "$0")/common.bash" "$@"

expect_error 2 "unknown flag '--no-such-flag'.*leantrain train --help" "$LT" train --no-such-flag
expect_error 2 "unknown flag '--lr-max'" "$LT" train --lr-max 3
expect_error 2 "unknown command 'trian'" "$LT" trian
expect_error 2 "unknown flag '--lr': flags go after a command" "$LT" --lr 3
expect_error 2 "unexpected argument 'extra'" "$LT" train extra
expect_error 2 "--batch abc is not a whole number: --batch takes 1 to [0-9]+ samples" "$LT" train --batch abc
expect_error 2 "missing value" "$LT" train --batch
expect_error 2 "^leantrain: error: --optimizer adam: the choices are sgd, adamw, lion, adamw8bit or lion8bit \(pass one of them\)" "$LT" train --optimizer adam
expect_error 2 "--state-dtype f16: the choices are auto, f32 or bf16" "$LT" train --state-dtype f16
expect_error 2 "--memory-history has nowhere to go.*--memory-report" "$LT" train --memory-history
expect_error 2 "--state-dtype with --optimizer adamw8bit" "$LT" train --optimizer adamw8bit --state-dtype bf16
expect_error 2 "--schedule linear: the choices are constant or cosine" "$LT" train --schedule linear
expect_error 2 "--batch 10 is not divisible by --micro-batch 4.*--micro-batch 2" "$LT" train --batch 10 --micro-batch 4
expect_error 2 "--lr" "$LT" train --lr -1
expect_error 2 "--nesterov with --optimizer adamw: .*belong to SGD" "$LT" train --nesterov
expect_error 2 "--nesterov with --momentum 0 --dampening 0: .*needs momentum > 0" "$LT" train --optimizer sgd --nesterov --momentum 0
expect_error 2 "--dampening 2: it must be in \\[0, 1\\)" "$LT" train --optimizer sgd --dampening 2
expect_error 2 "unknown device 'tpu'" "$LT" train --device tpu
expect_error 2 "unknown model 'gpt5'|gpt5" "$LT" train --model gpt5 --steps 1 --device cpu
expect_error 2 "missing flag: --checkpoint is required" "$LT" generate --prompt hi
expect_error 2 "unknown flag '--temp'" "$LT" generate --checkpoint x --temp 3

# --help works on every command, lists the flags and exits 0.
for cmd in "" train generate; do
  if "$LT" $cmd --help >"$WORK/help" 2>&1; then ok; else fail "'leantrain $cmd --help' exited non-zero"; fi
done
"$LT" train --help >"$WORK/help" 2>&1
for flag in --model --config --data --batch --micro-batch --steps --epochs --lr --optimizer --momentum --nesterov --dampening \
  --weight-decay --schedule --warmup --clip --seed --eval-every --save --resume --device --seq-len; do
  expect_grep "^ *$flag " "$WORK/help" "train --help ($flag)"
done
"$LT" generate --help >"$WORK/help" 2>&1
for flag in --checkpoint --prompt --max-new-tokens --temperature --top-k; do
  expect_grep "^ *$flag " "$WORK/help" "generate --help ($flag)"
done
finish
