# leantrain profile on the CPU: a row per block (and its attention and MLP) plus all blocks,
# bytes saved > 0 for blocks with measured == predicted to the byte, a well-formed SVG with one
# point per row, and one-line errors for bad flags, nothing to profile and unwritable outputs.
source "$(dirname "$0")/common.bash" "$@"

# Big enough that activations make the peak (the last block saves nothing: backward recomputes it first).
TINY=(--model gpt2-tiny --data synthetic --depth 2 --seq-len 128 --batch 4 --device cpu)

expect_ok "$LT" profile "${TINY[@]}" --warmup-steps 1 --timed-steps 2 --json "$WORK/p.json" --svg "$WORK/p.svg"
cp "$WORK/out" "$WORK/table.txt"
for want in "CPU figures" "baseline \(no checkpointing\)" "transformer\.h\.0\.attn" "all blocks" \
            "every measured peak equals the planner's" "^suggested: " "--checkpoint"; do
  expect_grep "$want" "$WORK/table.txt" "profile table"
done

python3 - "$WORK/p.json" "$WORK/p.svg" <<'PY' && ok || fail "profile JSON / SVG"
import json, sys, xml.etree.ElementTree as ET
j = json.load(open(sys.argv[1]))
rows = j["rows"]
mods = [r["module"] for r in rows]
assert mods == ["transformer.h.0", "transformer.h.0.attn", "transformer.h.0.mlp",
                "transformer.h.1", "transformer.h.1.attn", "transformer.h.1.mlp", "all blocks"], mods
assert j["cpu_figures"] is True and j["device"] == "cpu", j["device"]
assert j["warmup_steps"] == 1 and j["timed_steps"] == 2
b = j["baseline"]
assert b["peak_allocated_bytes_measured"] == b["peak_allocated_bytes_predicted"] > 0, b
for r in rows:
    for k in ("module", "bytes_saved_measured", "bytes_saved_predicted", "ms_added", "bytes_per_ms", "checkpoint"):
        assert k in r, (k, r)
    assert r["bytes_saved_measured"] == r["bytes_saved_predicted"], r
    assert r["peak_allocated_bytes_measured"] == r["peak_allocated_bytes_predicted"], r
    assert len(r["step_ms"]) == 2, r
    if r["bytes_per_ms"] is not None:
        assert r["ms_added"] > 0
assert rows[0]["bytes_saved_measured"] > 0 and rows[-1]["bytes_saved_measured"] > 0, rows
assert rows[-1]["activation_bytes_saved_measured"] > 0, rows[-1]
assert sum(r["suggested"] for r in rows) <= 1
assert any(r["pareto"] for r in rows)

svg = ET.parse(sys.argv[2]).getroot()
assert svg.tag == "{http://www.w3.org/2000/svg}svg", svg.tag
ns = {"s": "http://www.w3.org/2000/svg"}
points = [c for c in svg.iter("{http://www.w3.org/2000/svg}circle") if c.get("class") == "point"]
assert len(points) == len(rows), (len(points), len(rows))
labels = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text") if t.get("class") == "label"]
assert len(labels) == len(rows), labels
assert "all blocks" in labels and "h.0.attn" in labels, labels
ticks = [t for t in svg.iter("{http://www.w3.org/2000/svg}text") if t.get("class") in ("xtick", "ytick")]
assert len(ticks) >= 4
texts = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
assert "(KiB" in texts or "(MiB" in texts, texts
assert "ms" in texts
PY

# --modules blocks: one row per block plus all blocks; a regex selects exactly what it matches.
expect_ok "$LT" profile "${TINY[@]}" --modules blocks --warmup-steps 0 --timed-steps 1 --json "$WORK/b.json"
python3 -c "import json,sys; m=[r['module'] for r in json.load(open(sys.argv[1]))['rows']]; assert m==['transformer.h.0','transformer.h.1','all blocks'], m" \
  "$WORK/b.json" && ok || fail "--modules blocks rows"
expect_ok "$LT" profile "${TINY[@]}" --modules 'transformer\.h\.1\.mlp' --warmup-steps 0 --timed-steps 1 --json "$WORK/r.json"
python3 -c "import json,sys; m=[r['module'] for r in json.load(open(sys.argv[1]))['rows']]; assert m==['transformer.h.1.mlp','all blocks'], m" \
  "$WORK/r.json" && ok || fail "--modules regex rows"

# --subsets: every combination of the matched modules checkpointed together (seed 004's scatter),
# each row's --checkpoint reproducing it; more than 6 modules is refused before any run.
expect_ok "$LT" profile "${TINY[@]}" --modules 'transformer\.h\.[01]\.mlp' --subsets --warmup-steps 0 --timed-steps 1 \
  --json "$WORK/s.json"
python3 - "$WORK/s.json" <<'PY' && ok || fail "--subsets rows"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
m = [r["module"] for r in rows]
assert m == ["transformer.h.0.mlp", "transformer.h.1.mlp", "transformer.h.0.mlp+transformer.h.1.mlp", "all blocks"], m
both = rows[2]
assert both["bytes_saved_measured"] == both["bytes_saved_predicted"], both
assert both["checkpoint"] == r"(transformer\.h\.0\.mlp)|(transformer\.h\.1\.mlp)", both["checkpoint"]
PY
expect_error 2 "--subsets with 8 modules.*at most 6 modules" "$LT" profile "${TINY[@]}" --subsets --modules 'transformer\.h\.[01]\.(attn|mlp|ln_1|ln_2)'

# Errors: one line, exit 2, before any run.
expect_error 2 "nothing to profile: --modules 'nothing' matches no checkpointable module" \
  "$LT" profile "${TINY[@]}" --modules nothing
expect_error 2 "--modules 'transformer\\\\.h' matches transformer\.h \(a ModuleList\)" \
  "$LT" profile "${TINY[@]}" --modules 'transformer\.h'
expect_error 2 "not a valid regular expression" "$LT" profile "${TINY[@]}" --modules '(['
expect_error 2 "cannot write --json $WORK/no/such/dir/p.json: the directory $WORK/no/such/dir does not exist" \
  "$LT" profile "${TINY[@]}" --json "$WORK/no/such/dir/p.json"
expect_error 2 "cannot write --svg $WORK: it is a directory" "$LT" profile "${TINY[@]}" --svg "$WORK"
if [ "$(id -u)" != 0 ]; then
  mkdir "$WORK/ro" && chmod 555 "$WORK/ro"
  expect_error 2 "cannot write --svg $WORK/ro/p.svg: permission denied" "$LT" profile "${TINY[@]}" --svg "$WORK/ro/p.svg"
fi
expect_error 2 "--timed-steps 0 is out of range: --timed-steps takes 1 to [0-9]+ timed steps" "$LT" profile "${TINY[@]}" --timed-steps 0
expect_error 2 "--warmup-steps -1" "$LT" profile "${TINY[@]}" --warmup-steps -1
expect_error 2 "--checkpoint does not apply to 'leantrain profile'.*--modules" \
  "$LT" profile "${TINY[@]}" --checkpoint blocks
expect_error 2 "--steps does not apply to 'leantrain profile'" "$LT" profile "${TINY[@]}" --steps 10
expect_error 2 "unknown flag '--bogus': 'leantrain profile' has no such option" "$LT" profile --bogus
expect_error 2 "--timed-steps many is not a whole number" "$LT" profile "${TINY[@]}" --timed-steps many
expect_error 2 "unknown model|--model" "$LT" profile --model gpt7-huge --data synthetic --device cpu
finish
