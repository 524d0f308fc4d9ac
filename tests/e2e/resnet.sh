# ResNet on the CPU: resnet-tiny trains on synthetic images and on Fashion-MNIST (a few steps,
# with stages checkpointed), saves torchvision's names with the running statistics, resumes,
# evaluates a saved model; bad configs, size flags and wrong channels are one-line errors.
source "$(dirname "$0")/common.bash" "$@"
TOOL="python3 $(dirname "$0")/safetensors_tool.py"

expect_ok "$LT" train --model resnet-tiny --data synthetic --steps 3 --batch 8 --eval-batches 1 --device cpu \
  --save "$WORK/rn"
expect_grep "^model resnet-tiny: ResNet, 0\.[0-9]+M parameters \(28x28x1 images\); data synthetic" "$WORK/out" "train output"
expect_grep "^final: steps 3 \| train loss [0-9.]+" "$WORK/out" "train output"
if $TOOL check "$WORK/rn/model.safetensors" >"$WORK/names"; then ok; else fail "model.safetensors does not parse"; fi
for re in "^conv1.weight F32 \[16, 1, 7, 7\]" "^bn1.running_mean F32 \[16\]" "^bn1.running_var F32 \[16\]" \
  "^layer1.0.bn1.num_batches_tracked I64 \[\]" "^layer2.0.downsample.0.weight F32 \[32, 16, 1, 1\]" \
  "^fc.weight F32 \[10, 128\]"; do
  expect_grep "$re" "$WORK/names" "model.safetensors tensors"
done
expect_grep '"model_type": "resnet"' "$WORK/rn/config.json"
# The counter counted the three steps (8 little-endian bytes at the tensor's offset).
python3 - "$WORK/rn/model.safetensors" <<'PY' && ok || fail "num_batches_tracked is not 3"
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
h = json.loads(blob[8:8 + n])
a, _ = h["bn1.num_batches_tracked"]["data_offsets"]
assert struct.unpack("<q", blob[8 + n + a:8 + n + a + 8])[0] == 3
PY
expect_ok "$LT" train --resume "$WORK/rn" --steps 4
expect_grep "resumed from .* at step 3" "$WORK/out"
expect_grep "final: steps 4" "$WORK/out"

# Fashion-MNIST (when this machine has it), the first two stages recomputed in the backward.
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  expect_ok "$LT" train --model resnet-tiny --data fashion-mnist --steps 4 --batch 16 --eval-batches 2 --device cpu \
    --checkpoint 'layer(1|2)'
  expect_grep "^model resnet-tiny: ResNet, .*\(28x28 images, basic blocks \[1,1,1,1\]" "$WORK/out" "train output"
  expect_grep "^final: steps 4 .*test accuracy [0-9.]+%" "$WORK/out" "train output"
fi

# eval on a saved model: pixel_values of the right shape work, of the wrong channel count do not.
pixels() {  # FILE CHANNELS: pixel_values F32 [2, CHANNELS, 28, 28] and labels I64 [2]
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
c = int(sys.argv[2]); n = 2 * c * 28 * 28
px = struct.pack("<%df" % n, *[((i * 37) % 101) / 101.0 for i in range(n)])
lb = struct.pack("<2q", 3, 7)
h = {"pixel_values": {"dtype": "F32", "shape": [2, c, 28, 28], "data_offsets": [0, len(px)]},
     "labels": {"dtype": "I64", "shape": [2], "data_offsets": [len(px), len(px) + len(lb)]}}
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hb)) + hb + px + lb)
PY
}
pixels "$WORK/in1.safetensors" 1
pixels "$WORK/in3.safetensors" 3
expect_ok "$LT" eval --model "$WORK/rn" --inputs "$WORK/in1.safetensors" --out "$WORK/logits.safetensors" --device cpu
if $TOOL check "$WORK/logits.safetensors" | grep -q "^logits F32 \[2, 10\]"; then ok; else fail "eval wrote no [2, 10] logits"; fi
expect_error 1 "ResNet input: images have shape \[2, 3, 28, 28\]" \
  "$LT" eval --model "$WORK/rn" --inputs "$WORK/in3.safetensors" --device cpu

# Bad configs and flags.
bad_config() {  # REGEX JSON
  echo "$2" >"$WORK/config.json"
  expect_error 1 "$1" "$LT" train --config "$WORK/config.json" --data synthetic --steps 1 --device cpu
}
bad_config "layer_type 'dense'" '{"model_type": "resnet", "layer_type": "dense"}'
bad_config "depths \[2, 2\] and hidden_sizes \[64, 128, 256\]" \
  '{"model_type": "resnet", "depths": [2, 2], "hidden_sizes": [64, 128, 256]}'
bad_config "hidden_sizes \[250, 512, 1024, 2048\]" '{"model_type": "resnet", "hidden_sizes": [250, 512, 1024, 2048]}'
bad_config "'depths' must be a list" '{"model_type": "resnet", "depths": 4}'
bad_config "embedding_size = 0" '{"model_type": "resnet", "embedding_size": 0}'
expect_error 2 "do not apply to a ResNet" "$LT" train --model resnet-tiny --dim 32 --steps 1 --device cpu
expect_error 2 "selects no module" "$LT" train --model resnet-tiny --data synthetic --checkpoint 'layer9' --steps 1 \
  --device cpu
finish
