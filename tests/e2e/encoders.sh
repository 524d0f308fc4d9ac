# BERT-family text classifiers (BigBird too) on the CPU: fortune categories, a .jsonl with named labels and a
# directory of class files train and report accuracy; --save writes a config.json with the
# classes that loads again (--model DIR) and resumes; plan runs on meta; bad inputs are one line.
source "$(dirname "$0")/common.bash" "$@"

# Fortune categories (every fortune file a class) with bert-tiny, bytes.
expect_ok "$LT" train --model bert-tiny --data fortunes --steps 4 --batch 8 --seq-len 32 --eval-batches 2 --device cpu \
  --save "$WORK/bert"
OUT="$WORK/out"
expect_grep "^model bert-tiny: BERT, .* parameters \(dim 128, depth 2, heads 2, mlp 512, [0-9]+ classes, 32 positions\)" "$OUT"
expect_grep "data /usr/share/games/fortunes: [0-9]+ train / [0-9]+ validation texts in [0-9]+ classes" "$OUT"
expect_grep "^step 4/4 .*seq/s" "$OUT"
expect_grep "^final: steps 4 \| train loss [0-9.]+ \| test loss [0-9.]+ \| test accuracy [0-9.]+%" "$OUT"
python3 - "$WORK/bert/config.json" <<'EOF' && ok || fail "saved config.json"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["model_type"] == "bert" and c["architectures"] == ["BertForSequenceClassification"], c
assert c["id2label"]["0"] == "art" and len(c["id2label"]) >= 30, c["id2label"]
assert c["label2id"]["art"] == 0
EOF
# The saved classifier loads as a model directory and keeps its classes.
expect_ok "$LT" train --model "$WORK/bert" --data fortunes --steps 1 --batch 8 --seq-len 32 --eval-batches 1 --device cpu
expect_grep "weights loaded from" "$WORK/out"

# eval reads padded input_ids and one label per text.
python3 - "$WORK/bert_in.safetensors" <<'EOF'
import json, struct, sys
def st(path, tensors):
    header, data = {}, b""
    for name, (shape, vals) in tensors.items():
        b = b"".join(struct.pack("<q", v) for v in vals)
        header[name] = {"dtype": "I64", "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
st(sys.argv[1], {"input_ids": ([2, 6], [72, 105, 33, 0, 0, 0, 79, 107, 97, 121, 46, 10]), "labels": ([2], [0, 5])})
EOF
expect_ok "$LT" eval --model "$WORK/bert" --inputs "$WORK/bert_in.safetensors" --device cpu
expect_grep "^logits \[2, [0-9]+\] \| loss [0-9.]+" "$WORK/out"

# .jsonl with string labels, DistilBERT; a directory of class files, RoBERTa.
python3 - "$WORK/reviews.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(60):
        good = i % 2 == 0
        f.write(json.dumps({"text": ("great film, loved it " if good else "dull plot, hated it ") + str(i),
                            "label": "pos" if good else "neg"}) + "\n")
EOF
expect_ok "$LT" train --model distilbert-tiny --data "$WORK/reviews.jsonl" --steps 20 --batch 8 --lr 1e-3 \
  --eval-batches 1 --device cpu
expect_grep "54 train / 6 validation texts in 2 classes" "$WORK/out"
expect_grep "^final: .*test accuracy 100.00%" "$WORK/out"
mkdir -p "$WORK/pets"
for i in $(seq 12); do echo "meow $i"; done >"$WORK/pets/cats.txt"
for i in $(seq 11); do echo "woof $i"; done >"$WORK/pets/dogs.txt"
expect_ok "$LT" train --model roberta-tiny --data "$WORK/pets" --steps 2 --batch 2 --eval-batches 1 --device cpu
expect_grep "21 train / 2 validation texts in 2 classes" "$WORK/out"

# Real tokenizers: BERT's WordPiece (uncased, [CLS] ... [SEP], [PAD] = 0) and RoBERTa's byte-level
# BPE (<s> ... </s>, <pad> = 1), both from tests/data/tokenizers.
TOK=$(cd "$(dirname "$0")/../data/tokenizers" && pwd)
expect_ok "$LT" train --model bert-tiny --data fortunes --tokenizer "$TOK/bert-uncased" --steps 2 --batch 8 --seq-len 64 \
  --eval-batches 1 --device cpu
expect_grep "tokenizer wordpiece \(vocab 4096" "$WORK/out"
expect_ok "$LT" train --model roberta-tiny --data "$WORK/reviews.jsonl" --tokenizer "$TOK/roberta" --steps 2 --batch 8 \
  --eval-batches 1 --device cpu
expect_grep "tokenizer bpe-bytelevel" "$WORK/out"

# Synthetic data, a base-size plan on meta, and checkpointed layers by module path.
expect_ok "$LT" train --model roberta-tiny --data synthetic --steps 2 --batch 4 --seq-len 16 --device cpu \
  --checkpoint 'roberta\.encoder\.layer\.0'
expect_ok "$LT" plan --model bert-base-uncased --data synthetic --batch 8 --seq-len 128 --precision bf16-mixed
expect_grep "BERT" "$WORK/out"

# BigBird block_sparse: 150 positions run as 10 blocks of 16 (padded from 150), checkpointed layers
# draw the same random blocks when recomputed; a saved model keeps attention_type and loads again.
expect_ok "$LT" train --model bigbird-tiny --data fortunes --steps 3 --batch 4 --seq-len 150 --eval-batches 1 \
  --checkpoint blocks --device cpu --save "$WORK/bigbird"
expect_grep "^model bigbird-tiny: BigBird, .* 150 positions" "$WORK/out"
expect_grep "2 modules recomputed in backward: bert.encoder.layer.0, bert.encoder.layer.1" "$WORK/out"
python3 - "$WORK/bigbird/config.json" <<'EOF' && ok || fail "saved BigBird config.json"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["model_type"] == "big_bird" and c["architectures"] == ["BigBirdForSequenceClassification"], c
assert c["attention_type"] == "block_sparse" and c["block_size"] == 16 and c["num_random_blocks"] == 1, c
EOF
expect_ok "$LT" train --model "$WORK/bigbird" --data fortunes --steps 1 --batch 4 --seq-len 150 --eval-batches 1 --device cpu
expect_grep "weights loaded from" "$WORK/out"
expect_ok "$LT" plan --model bigbird-roberta-base --data synthetic --batch 4 --seq-len 4096 --precision bf16-true \
  --checkpoint blocks --optimizer adamw8bit
expect_grep "predicted peak allocated" "$WORK/out"
expect_error 2 "seq-len 1030.*1024 positions" "$LT" train --model bigbird-tiny --data synthetic --seq-len 1030 --device cpu

# Bad inputs: one line each, exit 2 for flags and 1 for data.
expect_error 2 "seq-len 600.*512 positions" "$LT" train --model bert-tiny --data synthetic --seq-len 600 --device cpu
expect_error 2 "fashion-mnist is images" "$LT" train --model bert-tiny --data fashion-mnist --device cpu
expect_error 2 "loss-chunk" "$LT" train --model bert-tiny --data synthetic --loss-chunk 64 --device cpu
printf '{"text": "a", "label": 0}\n{"text": "b", "label": "x"}\n' >"$WORK/mixed.jsonl"
expect_error 1 "mixed.jsonl:2: labels mix integers and strings" "$LT" train --model bert-tiny --data "$WORK/mixed.jsonl" --device cpu
printf 'hello\n' >"$WORK/notes.txt"
mkdir -p "$WORK/few"
printf 'meow\npurr\n' >"$WORK/few/cats.txt"
printf 'woof\nbark\n' >"$WORK/few/dogs.txt"
expect_error 1 "validation takes every 10th text of a class, and no class has that many.*at least 10 texts" "$LT" train \
  --model bert-tiny --data "$WORK/few" --device cpu
expect_error 1 "a classifier reads a .jsonl file" "$LT" train --model bert-tiny --data "$WORK/notes.txt" --device cpu
expect_error 2 "has 2 classes.*has [0-9]+" "$LT" train --model "$WORK/bert" --data "$WORK/pets" --device cpu
expect_error 1 "not a causal language model" "$LT" generate --checkpoint "$WORK/bert" --prompt "The "
finish
