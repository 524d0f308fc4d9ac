# Hostile inputs (issue #10): special files where a file is read, headers whose sizes overflow,
# numbers that do not fit their flag. Each is one error line and a non-zero exit, never a hang,
# a crash or a silently changed value. Commands that once hung or ran without end are under
# `timeout`, so that the old behaviour fails here instead of stalling the suite.
source "$(dirname "$0")/common.bash" "$@"
T=(timeout 20)
GPT=(--model gpt2-tiny --batch 2 --seq-len 16 --device cpu)

expect_ok "$LT" train "${GPT[@]}" --steps 2 --eval-batches 1 --save "$WORK/gpt" || { finish; exit 1; }

# ---- special files ----
# with_fifo NAME FILE: a copy of the checkpoint in $WORK/NAME with FILE replaced by a FIFO.
with_fifo() {
  rm -rf "${WORK:?}/$1"
  cp -r "$WORK/gpt" "$WORK/$1"
  rm "$WORK/$1/$2"
  mkfifo "$WORK/$1/$2"
}
with_fifo fifo_model model.safetensors
expect_error 1 "model.safetensors': it is a FIFO \(named pipe\), not a regular file" "${T[@]}" "$LT" train --steps 4 --resume "$WORK/fifo_model"
expect_error 1 "model.safetensors': it is a FIFO" "${T[@]}" "$LT" generate --max-new-tokens 4 --checkpoint "$WORK/fifo_model"
with_fifo fifo_state trainer_state.json
expect_error 1 "trainer_state.json': it is a FIFO" "${T[@]}" "$LT" generate --max-new-tokens 4 --checkpoint "$WORK/fifo_state"
with_fifo fifo_config config.json
expect_error 1 "config.json': it is a FIFO" "${T[@]}" "$LT" generate --max-new-tokens 4 --checkpoint "$WORK/fifo_config"

mkfifo "$WORK/corpus.txt"
expect_error 1 "corpus.txt': it is a FIFO" "${T[@]}" "$LT" train "${GPT[@]}" --steps 1 --data "$WORK/corpus.txt"
expect_error 1 "'/dev/zero': it is a character device, not a regular file" "${T[@]}" "$LT" train "${GPT[@]}" --steps 1 --data /dev/zero
mkfifo "$WORK/config.json"
expect_error 1 "config.json': it is a FIFO" "${T[@]}" "$LT" plan --config "$WORK/config.json"
mkdir -p "$WORK/model_dir/config.json"
expect_error 1 "config.json': it is a directory" "${T[@]}" "$LT" plan --model "$WORK/model_dir"

# A text file of 5 GiB (sparse: no disk used) is refused by its size, before it is read; the
# address-space limit keeps a reader that tries anyway from taking the machine's memory.
truncate -s 5G "$WORK/big.txt"
expect_error 1 "text in '.*big.txt' is too large: it holds more than 4 GiB" \
  with_memory_cap 4000000 "${T[@]}" "$LT" train "${GPT[@]}" --steps 1 --data "$WORK/big.txt"

# ---- IDX headers ----
# idx MAGIC_DIMS_HEX: an IDX header (hex bytes) and no data, gzipped, on stdout.
idx() { printf "$1" | gzip; }
mkdir "$WORK/fm"
# 4 x 2^31 x 2^31 = 2^64: wraps to 0 bytes, which "matched" the empty data and crashed in training.
idx '\x00\x00\x08\x03\x00\x00\x00\x04\x80\x00\x00\x00\x80\x00\x00\x00' >"$WORK/fm/train-images-idx3-ubyte.gz"
idx '\x00\x00\x08\x01\x00\x00\x00\x04\x00\x01\x02\x03' >"$WORK/fm/train-labels-idx1-ubyte.gz"
{ printf '\x00\x00\x08\x03\x00\x00\x00\x04\x00\x00\x00\x1c\x00\x00\x00\x1c'; head -c $((4 * 784)) /dev/zero; } | gzip \
  >"$WORK/fm/t10k-images-idx3-ubyte.gz"
cp "$WORK/fm/train-labels-idx1-ubyte.gz" "$WORK/fm/t10k-labels-idx1-ubyte.gz"
expect_error 1 "train-images-idx3-ubyte.gz' is not a valid IDX file: the data size in its header is too large" \
  "${T[@]}" "$LT" train --data "$WORK/fm" --steps 1 --batch 4 --patch 4 --device cpu
rm "$WORK/fm/train-images-idx3-ubyte.gz"
mkfifo "$WORK/fm/train-images-idx3-ubyte.gz"
expect_error 1 "train-images-idx3-ubyte.gz': it is a FIFO" "${T[@]}" "$LT" train --data "$WORK/fm" --steps 1 --batch 4 --device cpu

# ---- numbers ----
expect_error 2 "--steps 99999999999999999999 is out of range: --steps takes 0 to [0-9]+ optimizer steps" \
  "${T[@]}" "$LT" train "${GPT[@]}" --data synthetic --steps 99999999999999999999
expect_error 2 "--seed -1 is out of range" "$LT" plan --seed -1
expect_error 2 "--fit 1e300 is out of range: a memory size here is at most 1 PiB" \
  "${T[@]}" "$LT" train "${GPT[@]}" --data synthetic --steps 1 --fit 1e300
expect_error 2 "--budget 99999999999999999999GiB is out of range" "$LT" plan --budget 99999999999999999999GiB
expect_error 2 "--gemm-workspace 2147483648: cuBLASLt's workspace is 0 to 1 GiB" "$LT" plan --gemm-workspace 2GiB
expect_error 2 "--gemm-workspace" "$LT" plan --gemm-workspace -5MiB
expect_error 2 "--gemm-workspace" "$LT" plan --gemm-workspace lots
expect_error 2 "--attention-kernel flash: the choices are auto, leantrain or cudnn" "$LT" plan --attention-kernel flash
expect_error 2 "--attention-kernel cudnn cannot run this attention: cuDNN's fused attention: it takes bf16 or f16, not f32" \
  "$LT" plan --attention-kernel cudnn
expect_error 2 "--attention-kernel cudnn cannot run this attention: cuDNN's fused attention: it runs on CUDA devices only" \
  "${T[@]}" "$LT" train "${GPT[@]}" --data synthetic --steps 1 --attention-kernel cudnn
expect_error 2 "--dim 4294967296 is out of range: --dim takes 0 to [0-9]+ channels" "$LT" plan --model gpt2-tiny --dim 4294967296 --heads 1
expect_error 2 "--dim 1e9 is out of range" "$LT" plan --model gpt2-tiny --dim 1e9 --heads 1
expect_error 2 "--depth 100000 is out of range" "${T[@]}" "$LT" plan --model gpt2-tiny --depth 100000
expect_error 2 "--epochs 1e300 is out of range" "$LT" plan --epochs 1e300
expect_error 2 "--max-new-tokens 99999999999999999999 is out of range" \
  "${T[@]}" "$LT" generate --checkpoint "$WORK/gpt" --max-new-tokens 99999999999999999999
expect_error 2 "--timed-steps 99999999999999999999 is out of range" \
  "${T[@]}" "$LT" profile "${GPT[@]}" --data synthetic --timed-steps 99999999999999999999
expect_error 2 "--epochs 0: nothing to train" "${T[@]}" "$LT" train "${GPT[@]}" --data synthetic --epochs 0
expect_error 2 "--steps is given 2 times: it takes one value \(give --steps once\)" "$LT" train --steps 1 --steps 2
# A whole number written with an exponent is still a whole number.
expect_ok "$LT" train "${GPT[@]}" --data synthetic --steps 2e0 --eval-batches 1
expect_grep '^training 2 steps' "$WORK/out" "train --steps 2e0"
finish
