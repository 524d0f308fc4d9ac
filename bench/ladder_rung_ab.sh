#!/usr/bin/env bash
# One ladder rung (ViT-L/16, bench/ladder.sh's flags) under several settings in one call, alternating,
# to tell a code change from a slower machine: each variant is "name|ENV=VALUE ...|extra flags";
# extra flags "@R" take rung R's flags instead (e.g. @5ws32).
# Prints the median step of steps 2..N per run. GPU kernel time of one base run via nsys when present.
#   BUILD=g OUT=$OUT RUNG=5 ROUNDS=2 VARIANTS='base||;ws32||@5ws32;own0|LEANTRAIN_ATTN_OWN_DELTA=0|' bash bench/ladder_rung_ab.sh
set -u
BUILD=${BUILD:-build}; OUT=${OUT:-/tmp/rung-ab}; ROUNDS=${ROUNDS:-2}; STEPS=${STEPS:-12}
mkdir -p "$OUT"
flags_of() { bash -c 'source <(sed -n "/^rung_flags()/,/^}/p" bench/ladder.sh); rung_flags "$1"' _ "$1"; }
FLAGS=$(flags_of "${RUNG:-5}")
LT="./$BUILD/leantrain train --config bench/configs/vit-l-16-10cls.json --data synthetic --device ${DEVICE:-cuda} --steps $STEPS
    --eval-batches 0 --log-every $STEPS --weight-decay 0 --warmup 0"
echo "rung ${RUNG:-5}: $FLAGS"
IFS=';' read -r -a VS <<< "${VARIANTS:-base||}"
for round in $(seq 1 "$ROUNDS"); do
  for v in "${VS[@]}"; do
    IFS='|' read -r name envs extra <<< "$v"
    m="$OUT/$name-$round.metrics.jsonl"; rm -f "$m"; f=$FLAGS
    extra=${extra#"${extra%%[![:space:]]*}"}
    case $extra in @*) f=$(flags_of "${extra#@}"); extra="" ;; esac
    # shellcheck disable=SC2086
    env $envs $LT $f $extra --metrics "$m" > "$OUT/$name-$round.log" 2>&1 || { echo "$name: failed"; tail -2 "$OUT/$name-$round.log"; continue; }
    python3 - "$m" "$name" "$round" <<'PY'
import json, statistics, sys
secs = [json.loads(l)["seconds"] for l in open(sys.argv[1]) if '"loss"' in l]
print(json.dumps({"variant": sys.argv[2], "round": int(sys.argv[3]), "median_step_ms": round(1e3 * statistics.median(secs[1:]), 2),
                  "steps_ms": [round(1e3 * s, 1) for s in secs]}))
PY
  done
done | tee "$OUT/rung_ab.jsonl"
if [ "${NSYS:-1}" = 1 ] && command -v nsys > /dev/null; then
  # shellcheck disable=SC2086
  nsys profile -o "$OUT/base" --force-overwrite true $LT $FLAGS > "$OUT/nsys.log" 2>&1
  nsys stats --report cuda_gpu_kern_sum --format csv "$OUT/base.nsys-rep" 2>/dev/null | python3 -c "
import csv, sys
rows = list(csv.DictReader(l for l in sys.stdin if l.count(',') > 3))
tot = sum(float(r['Total Time (ns)']) for r in rows) / 1e6
print(f'GPU kernel time of the whole $STEPS-step run: {tot:.1f} ms over', sum(int(r['Instances']) for r in rows), 'launches')"
  nsys stats --report cuda_api_sum --format csv "$OUT/base.nsys-rep" 2>/dev/null | head -6
fi
