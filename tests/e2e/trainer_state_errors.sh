# A damaged trainer_state.json or config.json: one line naming the file and the field, exit 1,
# never "internal error ... please report this as a bug". Resume checks config.json as generate does.
source "$(dirname "$0")/common.bash" "$@"
expect_ok "$LT" train --model gpt2-tiny --steps 2 --batch 2 --seq-len 16 --eval-batches 1 --device cpu \
  --precision 16-mixed --save "$WORK/gpt" || { finish; exit 1; }
grep -q '"loss_scaler"' "$WORK/gpt/trainer_state.json" && ok || fail "the 16-mixed checkpoint has no loss scaler state"

# edit PYTHON: a copy of the checkpoint in $WORK/bad whose trainer_state.json (as d) PYTHON changes.
edit() {
  rm -rf "${WORK:?}/bad" && cp -r "$WORK/gpt" "$WORK/bad"
  python3 - "$WORK/bad/trainer_state.json" "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(d, open(sys.argv[1], "w"))
PY
}
F="bad/trainer_state.json is corrupt"
both() {  # REGEX: resume and generate both fail with it
  expect_error 1 "$F: $1" "$LT" train --steps 4 --resume "$WORK/bad"
  expect_error 1 "$F: $1" "$LT" generate --max-new-tokens 2 --checkpoint "$WORK/bad"
}
edit 'd["epoch"] = "x"';                    both '"epoch" is string "x", not an integer'
edit 'd["step"] = -3';                      both '"step" is number -3, not an integer'
edit 'd["format"] = 7';                     both 'the file has no "format": "leantrain-checkpoint-1"'
edit 'd["tokenizer"] = 7';                  both '"tokenizer" is number 7, not a string'
edit 'd["dropout_rng"] = [1, 2]';           both '"dropout_rng" is array, not an object'
edit 'd["dropout_rng"]["transformer.drop"]["offset"] = "zz"'
both '"dropout_rng"."transformer.drop"."offset" is string "zz", not a non-negative integer'
edit 'd["dropout_rng"]["transformer.drop"] = 5'
both '"dropout_rng"."transformer.drop" is number, not an object'
edit 'd["hooks"]["loss_scaler"] = 5';       both '"hooks"."loss_scaler" is number 5, not a string'
edit 'd["hooks"] = "x"';                    both '"hooks" is string, not an object'
edit 'd["config"]["batch"] = "big"';        both 'its "config" is damaged: "batch" is string "big", not an integer'
edit 'd["config"]["lr"] = [1]';             both 'its "config" is damaged: "lr" is array \[1\], not a number'
edit 'd["config"]["fused_step"] = 1';       both 'its "config" is damaged: "fused_step" is number 1, not true or false'
edit 'd["config"]["seed"] = -1';            both 'its "config" is damaged: "seed" is number -1, not a non-negative integer'
edit 'd["config"] = 3';                     both '"config" is number, not an object'
edit 'del d["config"]';                     both '"config" is missing'
edit 'd["hooks"]["loss_scaler"] = "{}"'
expect_error 1 "loss scaler state is damaged" "$LT" train --steps 4 --resume "$WORK/bad"

# config.json: missing or altered is refused on resume as on generate.
edit 'pass'
rm "$WORK/bad/config.json"
expect_error 1 "bad' is not a complete leantrain checkpoint: config.json is missing" "$LT" train --steps 4 --resume "$WORK/bad"
edit 'pass'
sed -i 's/"n_embd": 128/"n_embd": -5/' "$WORK/bad/config.json"
expect_error 1 "bad: config.json: GPT-2 config: n_embd = -5: it must be positive" \
  "$LT" train --steps 4 --resume "$WORK/bad"
edit 'pass'
echo '[1, 2]' >"$WORK/bad/config.json"
expect_error 1 "bad: config.json: config.json must be a JSON object: found array" "$LT" train --steps 4 --resume "$WORK/bad"
echo '{}' >"$WORK/bad/config.json"
expect_error 1 "bad: config.json: config.json has no \"model_type\"" "$LT" train --steps 4 --resume "$WORK/bad"
finish
