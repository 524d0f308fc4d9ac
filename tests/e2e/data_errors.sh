# Bad data: a missing directory or file, or a corrupt/truncated one, is one line and exit 1;
# data of the wrong kind for the model is a usage error (exit 2).
source "$(dirname "$0")/common.bash" "$@"
FMNIST=/usr/share/datasets/fashion-mnist
RUN=("$LT" train --steps 1 --batch 8 --device cpu)

expect_error 1 "Fashion-MNIST not found: no directory $WORK/missing" "${RUN[@]}" --data "$WORK/missing"
expect_error 1 "text not found.*$WORK/missing.txt" "${RUN[@]}" --model gpt2-tiny --data "$WORK/missing.txt"
: >"$WORK/empty.txt"
expect_error 1 "no text in .*empty.txt" "${RUN[@]}" --model gpt2-tiny --data "$WORK/empty.txt"
expect_error 2 "--data fortunes is text" "${RUN[@]}" --data fortunes
expect_error 2 "--data fashion-mnist is images" "${RUN[@]}" --model gpt2-tiny --data fashion-mnist

if [ -d "$FMNIST" ]; then
  # A file that is not IDX, one that is truncated, and a labels file that is not gzip.
  mkdir "$WORK/d"
  cp "$FMNIST"/* "$WORK/d/"
  echo garbage | gzip >"$WORK/d/train-images-idx3-ubyte.gz"
  expect_error 1 "train-images-idx3-ubyte.gz' is not a valid IDX file" "${RUN[@]}" --data "$WORK/d"
  head -c 100000 "$FMNIST/train-images-idx3-ubyte.gz" >"$WORK/d/train-images-idx3-ubyte.gz"
  expect_error 1 "train-images-idx3-ubyte.gz' is corrupt" "${RUN[@]}" --data "$WORK/d"
  cp "$FMNIST/train-images-idx3-ubyte.gz" "$WORK/d/"
  echo "not gzip" >"$WORK/d/t10k-labels-idx1-ubyte.gz"
  expect_error 1 "t10k-labels-idx1-ubyte.gz' is not a valid IDX file" "${RUN[@]}" --data "$WORK/d"
  rm "$WORK/d/t10k-labels-idx1-ubyte.gz"
  expect_error 1 "t10k-labels-idx1-ubyte.gz" "${RUN[@]}" --data "$WORK/d"
else
  echo "note: $FMNIST missing (apt-get install dataset-fashion-mnist); corrupt-file cases skipped"
fi
finish
