# Data parallelism on the CPU over MPI (issue #13): `mpirun -np 2 leantrain train --strategy S`
# gives the losses of the 1-process run with the same global batch (within 1e-5 relative: the
# ranks' half-batch means are averaged in f32 instead of one mean over the batch), for ddp,
# zero1, zero2 and fsdp, with and without micro-batches; fsdp from a model directory loads each
# rank's share; each rank keeps less memory the more is sharded; repeated runs give identical
# losses; --devices 2 starts the same job itself; `plan --devices 2` predicts rank 0's measured peak exactly for each strategy; checkpoints of
# every strategy resume on another world size, --save-sharded ones too (hostile manifests
# refused); fsdp with checkpointed blocks gives the checkpointed losses; the evaluation gives the
# 1-process validation loss; every rank's measured peak is its plan's; a mismatched
# configuration, a rank that dies, a rank killed with SIGKILL, a hung collective (the watchdog)
# and a batch that does not split end the job with one clear line, never a hang. Skipped visibly
# without mpirun.
source "$(dirname "$0")/common.bash" "$@"
if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev, or scripts/deps.sh)"
  exit 0
fi
# A build without MPI where mpirun exists is a failure, except where it is meant (scripts/sanitize.sh).
if ! grep -q MPI_Init_thread "$LT"; then
  if [ -n "${LT_E2E_NO_MPI:-}" ]; then
    echo "SKIP: $LT was built without MPI on purpose (LT_E2E_NO_MPI)"
    exit 0
  fi
  fail "$LT was built without MPI while mpirun is installed (install libopenmpi-dev and re-run cmake)"
  finish
  exit
fi
# Root in CI containers must say so; containers often forbid the cross-memory-attach copy.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
MPI=(timeout 300 mpirun -np 2 --oversubscribe)
# Windows of 32 tokens, not the preset's 128: a step costs a quarter, and nothing checked here
# depends on the length (the tied-table case below picks its own, 16). --packing concat: every
# position a target, so each rank's mean loss is over as many targets as the others' and their
# average is one process's mean; padded or masked rows weigh each rank's mean equally instead
# (docs/user-guide.md, "Packing").
BASE0=(train --device cpu --model gpt2-tiny --data fortunes --packing concat --lr 1e-3 --eval-batches 1 --workers 1)
BASE=("${BASE0[@]}" --seq-len 32)
COMMON=("${BASE[@]}" --steps 5)
RUN=("${COMMON[@]}" --batch 8)

# same_losses A B TOL what: the "loss" of every step of two metrics files agree within TOL (relative).
same_losses() {
  if python3 - "$1" "$2" "$3" <<'PY'; then ok; else fail "$4: losses differ"; fi
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l and "eval_loss" not in l]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if len(a) != len(b) or not a: print(f"steps: {len(a)} vs {len(b)}"); sys.exit(1)
for i, (x, y) in enumerate(zip(a, b)):
    if abs(x - y) > tol * max(1.0, abs(x)): print(f"step {i+1}: {x!r} vs {y!r}"); sys.exit(1)
PY
}

expect_ok "$LT" "${RUN[@]}" --metrics "$WORK/one.jsonl"
expect_ok "$LT" "${RUN[@]}" --micro-batch 4 --metrics "$WORK/one_mb.jsonl"
if ! "${MPI[@]}" "$LT" --version >/dev/null 2>&1; then fail "mpirun cannot start two ranks here"; finish; exit; fi
for s in ddp zero1 zero2 fsdp; do
  if expect_ok "${MPI[@]}" "$LT" "${RUN[@]}" --strategy $s --metrics "$WORK/$s.jsonl"; then
    expect_grep "rank 0 of 2, strategy $s: each rank trains on 4 of the 8 samples" "$WORK/out" "$s run"
    same_losses "$WORK/one.jsonl" "$WORK/$s.jsonl" 1e-5 "$s vs 1 process"
  fi
  if expect_ok "${MPI[@]}" "$LT" "${RUN[@]}" --micro-batch 4 --strategy $s --metrics "$WORK/${s}_mb.jsonl"; then
    same_losses "$WORK/one_mb.jsonl" "$WORK/${s}_mb.jsonl" 1e-5 "$s with micro-batches vs 1 process"
  fi
done
# --clip under zero2 / fsdp clips by the whole model's norm (the shards' norms combined).
expect_ok "$LT" "${RUN[@]}" --clip 0.5 --metrics "$WORK/one_clip.jsonl"
for s in zero2 fsdp; do
  if expect_ok "${MPI[@]}" "$LT" "${RUN[@]}" --clip 0.5 --strategy $s --metrics "$WORK/${s}_clip.jsonl"; then
    same_losses "$WORK/one_clip.jsonl" "$WORK/${s}_clip.jsonl" 1e-5 "$s --clip 0.5 vs 1 process"
  fi
done
# Every rank writes its own memory snapshot (rank 1's beside rank 0's), and only rank 0 metrics.
if expect_ok "${MPI[@]}" "$LT" "${BASE[@]}" --batch 8 --strategy zero2 --steps 2 --memory-snapshot "$WORK/snap.json" --metrics "$WORK/snap-metrics.jsonl"; then
  if [ -s "$WORK/snap.json" ] && [ -s "$WORK/snap.pickle" ] && [ -s "$WORK/snap.rank1.json" ] && [ -s "$WORK/snap.rank1.pickle" ]; then ok
  else fail "a snapshot per rank: $(ls "$WORK" | grep snap | tr '\n' ' ')"; fi
fi
# An untied LLaMA: fsdp gathers the embedding table for its lookup only and the head from its
# forward to its backward (Model::standalone_modules); a chunked loss reads the head's weight
# directly, so then the head stays replicated. Same losses as one process in every case.
cat > "$WORK/untied.json" <<'JSON'
{"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256, "tie_word_embeddings": false}
JSON
UNTIED=(train --device cpu --config "$WORK/untied.json" --data synthetic --lr 1e-3 --eval-batches 1 --workers 1 --steps 4 --batch 8 --seq-len 32)
expect_ok "$LT" "${UNTIED[@]}" --metrics "$WORK/untied_one.jsonl"
for extra in "--checkpoint blocks" "--checkpoint blocks --loss-chunk 64" "--reshard-after-forward false"; do
  # shellcheck disable=SC2086  # $extra is a list of flags
  if expect_ok "${MPI[@]}" "$LT" "${UNTIED[@]}" --strategy fsdp $extra --metrics "$WORK/untied_fsdp.jsonl"; then
    same_losses "$WORK/untied_one.jsonl" "$WORK/untied_fsdp.jsonl" 1e-5 "untied LLaMA fsdp $extra vs 1 process"
  fi
done
# Under bf16-mixed fsdp gathers the blocks as bf16 copies (FSDP2's param dtype), which autocast
# hands out in the f32 parameters' place: the losses are those of gathering the f32 parameters
# (--fsdp-gather f32) to the last bit, with checkpointed blocks and without resharding
# too, and for BERT (stacked q | k | v biases); every rank's peak is its plan's, and rank 0 holds
# less than with the f32 gather.
lowp_case() {  # NAME FLAGS...
  local name=$1; shift
  expect_ok "${MPI[@]}" "$LT" "$@" --strategy fsdp --metrics "$WORK/$name.jsonl" --metrics-json "$WORK/$name.json" || return
  expect_ok "${MPI[@]}" "$LT" "$@" --strategy fsdp --fsdp-gather f32 \
    --metrics "$WORK/${name}_f32.jsonl" --metrics-json "$WORK/${name}_f32.json" || return
  same_losses "$WORK/${name}_f32.jsonl" "$WORK/$name.jsonl" 0 "$name: bf16 gather vs f32 gather"
  local planned=""
  for r in 0 1; do
    planned="$planned $("$LT" plan "${@:2}" --strategy fsdp --devices 2 --device-type cpu --rank $r --json |
      python3 -c "import json,sys; print(json.load(sys.stdin)['peak_allocated_bytes'])")"
  done
  if python3 - "$WORK/$name.json" "$WORK/${name}_f32.json" $planned <<'PY'; then ok; else fail "$name: peaks vs plan / f32 gather"; fi
import json, sys
low = json.load(open(sys.argv[1]))["rank_peak_allocated_bytes"]
f32 = json.load(open(sys.argv[2]))["rank_peak_allocated_bytes"]
plan = [int(x) for x in sys.argv[3:]]
print("bf16 gather", low, "f32 gather", f32, "plan", plan)
sys.exit(0 if low == plan and low[0] <= f32[0] else 1)
PY
}
lowp_case untied_bf16 "${UNTIED[@]}" --precision bf16-mixed
lowp_case untied_bf16_ckpt "${UNTIED[@]}" --precision bf16-mixed --checkpoint blocks
lowp_case untied_bf16_keep "${UNTIED[@]}" --precision bf16-mixed --reshard-after-forward false
if python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['rank_peak_allocated_bytes'][0] < json.load(open(sys.argv[2]))['rank_peak_allocated_bytes'][0] else 1)" \
    "$WORK/untied_bf16.json" "$WORK/untied_bf16_f32.json"; then ok; else fail "the bf16 gather does not lower rank 0's peak"; fi
# Fine-tuning a model directory under fsdp: each rank builds and loads only its share of the
# blocks, table and head (dist/fsdp_build.h), and the losses are one process's from the same weights.
expect_ok "$LT" train --device cpu --config "$WORK/untied.json" --data synthetic --workers 1 --steps 2 --batch 8 --seq-len 32 \
  --eval-batches 1 --save "$WORK/untied_base"
FROM_DIR=(train --device cpu --model "$WORK/untied_base" --data synthetic --lr 1e-3 --eval-batches 1 --workers 1 --steps 3 --batch 8 --seq-len 32)
expect_ok "$LT" "${FROM_DIR[@]}" --metrics "$WORK/from_dir_one.jsonl"
if expect_ok "${MPI[@]}" "$LT" "${FROM_DIR[@]}" --strategy fsdp --metrics "$WORK/from_dir_fsdp.jsonl"; then
  same_losses "$WORK/from_dir_one.jsonl" "$WORK/from_dir_fsdp.jsonl" 1e-5 "fsdp from a model directory vs 1 process"
fi
# ... saved by fsdp (rank 0 writes the other rank's blocks, table or head from host copies taken
# one unit at a time) and resumed by one process: the 1-process losses.
if expect_ok "${MPI[@]}" "$LT" "${FROM_DIR[@]}" --strategy fsdp --stop-at 2 --save "$WORK/from_dir_ck" \
    --metrics "$WORK/from_dir_resumed.jsonl"; then
  expect_ok "$LT" train --resume "$WORK/from_dir_ck" --metrics "$WORK/from_dir_resumed.jsonl"
  same_losses "$WORK/from_dir_one.jsonl" "$WORK/from_dir_resumed.jsonl" 1e-5 "fsdp save of an untied LLaMA, resumed on 1"
fi
# A text classifier (BERT, post-norm layers as the blocks that fsdp shards and ddp buckets):
# fortune categories, the 1-process losses under ddp, zero2 and fsdp, checkpointed too.
cat > "$WORK/bert.json" <<'JSON'
{"model_type": "bert", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 64, "hidden_dropout_prob": 0.0, "classifier_dropout": 0.0}
JSON
BERT=(train --device cpu --config "$WORK/bert.json" --data fortunes --lr 1e-3 --eval-batches 1 --workers 1 --steps 4 --batch 8 --seq-len 32)
expect_ok "$LT" "${BERT[@]}" --metrics "$WORK/bert_one.jsonl"
for s in ddp zero2 fsdp "fsdp --checkpoint blocks"; do
  # shellcheck disable=SC2086  # $s is a strategy and maybe more flags
  if expect_ok "${MPI[@]}" "$LT" "${BERT[@]}" --strategy $s --metrics "$WORK/bert_dist.jsonl"; then
    same_losses "$WORK/bert_one.jsonl" "$WORK/bert_dist.jsonl" 1e-5 "BERT classifier $s vs 1 process"
  fi
done
lowp_case bert_bf16 "${BERT[@]}" --precision bf16-mixed
# The held-out evaluation is split over the ranks too (a last batch that does not split is
# evaluated whole and counted once): the 1-process validation loss, every batch of it.
same_eval() {
  if python3 - "$1" "$2" <<'PY'; then ok; else fail "$3: eval losses differ"; fi
import json, sys
e = [[json.loads(l)["eval_loss"] for l in open(p) if "eval_loss" in l] for p in sys.argv[1:]]
sys.exit(0 if e[0] and len(e[0]) == len(e[1]) and all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(*e)) else 1)
PY
}
same_eval "$WORK/one.jsonl" "$WORK/ddp.jsonl" "ddp"
# One fortune file as a text file, not all of them: its last 10%, 2451 tokens, are 19 windows of
# 128 (--packing concat; docs would add a 20th, partial row), three batches of 6 and a last of 1
# that does not split (every fortune's held-out split was 2052 windows, 47 s of CPU per run for
# the same check).
ALL_EVAL=(train --device cpu --model gpt2-tiny --data /usr/share/games/fortunes/fortunes --lr 1e-3 --eval-batches 0 --workers 1
          --steps 2 --batch 6 --packing concat)
expect_ok "$LT" "${ALL_EVAL[@]}" --metrics "$WORK/one_eval_all.jsonl"
if expect_ok "${MPI[@]}" "$LT" "${ALL_EVAL[@]}" --strategy fsdp --metrics "$WORK/fsdp_eval_all.jsonl"; then
  same_eval "$WORK/one_eval_all.jsonl" "$WORK/fsdp_eval_all.jsonl" "fsdp, every held-out batch"
fi
# fsdp keeping the gathered blocks to backward: the same losses.
if expect_ok "${MPI[@]}" "$LT" "${RUN[@]}" --strategy fsdp --reshard-after-forward false --metrics "$WORK/fsdp_keep.jsonl"; then
  same_losses "$WORK/fsdp.jsonl" "$WORK/fsdp_keep.jsonl" 0 "fsdp --reshard-after-forward false vs true"
fi
# fsdp with checkpointed blocks: the region gathers its block again to recompute it, and the
# losses are those of one checkpointed process (with and without resharding after forward).
expect_ok "$LT" "${RUN[@]}" --checkpoint blocks --metrics "$WORK/one_ckpt.jsonl"
for r in true false; do
  if expect_ok "${MPI[@]}" "$LT" "${RUN[@]}" --checkpoint blocks --strategy fsdp --reshard-after-forward $r \
      --metrics "$WORK/fsdp_ckpt_$r.jsonl"; then
    same_losses "$WORK/one_ckpt.jsonl" "$WORK/fsdp_ckpt_$r.jsonl" 1e-5 "fsdp --checkpoint blocks (reshard $r) vs 1 process"
  fi
done
# A tied table (gpt2-tiny's wte, 256 rows) under ddp and zero1: the head's part is reduced as soon
# as the head's backward is done, and the lookup's rows of every rank (4 x 16 each) are gathered
# and added after it. The losses are one process's, with and without micro-batches, and rank 0's
# plan is its measured peak.
SHORT=("${BASE0[@]}" --steps 5 --batch 8 --seq-len 16)
expect_ok "$LT" "${SHORT[@]}" --metrics "$WORK/one_short.jsonl"
expect_ok "$LT" "${SHORT[@]}" --micro-batch 4 --metrics "$WORK/one_short_mb.jsonl"
for s in ddp zero1; do
  expect_ok "${MPI[@]}" "$LT" "${SHORT[@]}" --strategy $s --metrics "$WORK/${s}_short.jsonl" &&
    same_losses "$WORK/one_short.jsonl" "$WORK/${s}_short.jsonl" 1e-5 "$s, tied table's rows gathered, vs 1 process"
  expect_ok "${MPI[@]}" "$LT" "${SHORT[@]}" --micro-batch 4 --strategy $s --metrics "$WORK/${s}_short_mb.jsonl" &&
    same_losses "$WORK/one_short_mb.jsonl" "$WORK/${s}_short_mb.jsonl" 1e-5 "$s, tied table, micro-batches, vs 1 process"
done
if expect_ok "${MPI[@]}" "$LT" "${BASE0[@]}" --batch 8 --seq-len 16 --steps 2 --metrics-json "$WORK/measured_short.json"; then
  "$LT" plan "${BASE0[@]:1}" --batch 8 --seq-len 16 --steps 2 --devices 2 --device-type cpu --json >"$WORK/plan_short.json" ||
    fail "plan of the tied-table run failed"
  planned=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_allocated_bytes'])" "$WORK/plan_short.json")
  measured=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['rank_peak_allocated_bytes'][0])" "$WORK/measured_short.json")
  [ "$planned" = "$measured" ] && ok || fail "tied-table ddp: plan says $planned B, rank 0 measured $measured B"
fi

# What each rank keeps between steps: fsdp less than zero2, zero2 and zero1 less than ddp
# (the progress line's "mem": parameters, gradients and optimizer state after the step).
mem_of() { grep -Eo 'mem [0-9.]+ MiB' "$WORK/mem_$1" | tail -1 | grep -Eo '[0-9.]+'; }
for s in ddp zero1 fsdp; do "${MPI[@]}" "$LT" "${RUN[@]}" --strategy $s >"$WORK/mem_$s" 2>&1; done
if python3 -c "import sys; d,z,f=map(float,sys.argv[1:]); sys.exit(0 if f < z < d else 1)" "$(mem_of ddp)" "$(mem_of zero1)" "$(mem_of fsdp)"; then
  ok
else
  fail "memory per rank: ddp $(mem_of ddp), zero1 $(mem_of zero1), fsdp $(mem_of fsdp) MiB: want fsdp < zero1 < ddp"
fi
# plan --devices 2 --strategy S replays rank 0's allocations: its predicted peak is the measured one, to the byte.
peak_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_allocated_bytes'])" "$1"; }
for s in ddp zero1 zero2 fsdp; do
  expect_ok "${MPI[@]}" "$LT" "${BASE[@]}" --batch 8 --steps 2 --strategy $s --metrics-json "$WORK/measured_$s.json" || continue
  "$LT" plan "${BASE[@]:1}" --batch 8 --steps 2 --strategy $s --devices 2 --device-type cpu --json >"$WORK/plan_$s.json" 2>"$WORK/err" || {
    fail "plan --strategy $s failed"; cat "$WORK/err" >&2; continue; }
  if [ "$(peak_of "$WORK/plan_$s.json")" = "$(peak_of "$WORK/measured_$s.json")" ]; then ok; else
    fail "$s: plan says $(peak_of "$WORK/plan_$s.json") B, rank 0 measured $(peak_of "$WORK/measured_$s.json") B"; fi
done
# ... and fsdp with checkpointed blocks (gathers in the recomputation, prefetches in both directions).
if expect_ok "${MPI[@]}" "$LT" "${BASE[@]}" --batch 8 --steps 2 --strategy fsdp --checkpoint blocks --metrics-json "$WORK/measured_fsdp_ckpt.json"; then
  "$LT" plan "${BASE[@]:1}" --batch 8 --steps 2 --strategy fsdp --checkpoint blocks --devices 2 --device-type cpu --json \
    >"$WORK/plan_fsdp_ckpt.json" 2>"$WORK/err" || fail "plan --strategy fsdp --checkpoint blocks failed"
  if [ "$(peak_of "$WORK/plan_fsdp_ckpt.json")" = "$(peak_of "$WORK/measured_fsdp_ckpt.json")" ]; then ok; else
    fail "fsdp + checkpoint: plan says $(peak_of "$WORK/plan_fsdp_ckpt.json") B, rank 0 measured $(peak_of "$WORK/measured_fsdp_ckpt.json") B"; fi
fi
# Every rank's measured peaks are in rank 0's --metrics-json; rank 1's is plan --rank 1's.
if python3 - "$WORK/measured_fsdp.json" "$(
    "$LT" plan "${BASE[@]:1}" --batch 8 --steps 2 --strategy fsdp --devices 2 --device-type cpu --rank 1 --json | peak_of /dev/stdin
  )" <<'PY'; then ok; else fail "fsdp rank 1: measured peak differs from plan --rank 1"; fi
import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(0 if j["rank_peak_allocated_bytes"][1] == int(sys.argv[2]) else 1)
PY
expect_error 2 "--rank 2.*the plan has 2 ranks" "$LT" plan "${RUN[@]:1}" --strategy fsdp --devices 2 --device-type cpu --rank 2
expect_ok "$LT" plan "${RUN[@]:1}" --strategy fsdp --devices 2 --device-type cpu
expect_grep '^  rank 1: peak allocated' "$WORK/out" "plan's per-rank lines"
# zero1 steps the same numbers as ddp (only where they are computed changes): identical.
same_losses "$WORK/ddp.jsonl" "$WORK/zero1.jsonl" 0 "zero1 vs ddp"
# Run to run: the reductions sum in rank order, so a repeat is identical to the last bit.
expect_ok "${MPI[@]}" "$LT" "${RUN[@]}" --strategy zero2 --metrics "$WORK/zero2_again.jsonl"
same_losses "$WORK/zero2.jsonl" "$WORK/zero2_again.jsonl" 0 "zero2 twice"
# zero2's reported gradient norm is the whole model's (the shards' norms combined), as ddp's.
if python3 - "$WORK/ddp.jsonl" "$WORK/zero2.jsonl" <<'PY'; then ok; else fail "zero2's grad_norm is not the global one"; fi
import json, sys
n = [[json.loads(l)["grad_norm"] for l in open(p) if "grad_norm" in l] for p in sys.argv[1:]]
sys.exit(0 if all(abs(a - b) <= 1e-5 * a for a, b in zip(*n)) else 1)
PY

# --devices 2 on the CPU hands the same job to mpirun.
if expect_ok timeout 300 "$LT" "${RUN[@]}" --devices 2 --metrics "$WORK/devices.jsonl"; then
  same_losses "$WORK/ddp.jsonl" "$WORK/devices.jsonl" 0 "--devices 2 vs mpirun -np 2"
fi

# expect_job_error REGEX CMD...: the job fails (non-zero, within the timeout) and some rank's
# stderr has exactly one leantrain line, matching REGEX. mpirun adds its own notice.
expect_job_error() {
  local regex=$1 rc=0
  shift
  "$@" >"$WORK/out" 2>"$WORK/err" </dev/null || rc=$?
  if [ "$rc" = 0 ]; then fail "exit 0, want a failure: $*"; return; fi
  if [ "$rc" = 124 ]; then fail "the job hung (timeout): $*"; return; fi
  if [ "$(grep -c '^leantrain: error: ' "$WORK/err")" -lt 1 ]; then fail "no leantrain error line: $*"; cat "$WORK/err" >&2; return; fi
  if ! grep '^leantrain: error: ' "$WORK/err" | grep -Eq -- "$regex"; then fail "no error matches /$regex/: $*"; cat "$WORK/err" >&2; return; fi
  if grep -Eqi 'terminate called|segmentation|core dumped' "$WORK/err"; then fail "crash text: $*"; return; fi
  ok
}
# ddp saves from rank 0 (the whole state is on every rank) and resumes on another world size:
# stopped after step 3 on 2 ranks, continued on 1 process, the last steps are the 1-process run's.
expect_ok "${MPI[@]}" "$LT" "${RUN[@]}" --stop-at 3 --save "$WORK/ck" --metrics "$WORK/resumed.jsonl"
expect_ok "$LT" train --resume "$WORK/ck" --metrics "$WORK/resumed.jsonl"
same_losses "$WORK/one.jsonl" "$WORK/resumed.jsonl" 1e-5 "ddp saved on 2 ranks, resumed on 1"

# One rank with another --weight-decay: refused at start by the configuration hash.
expect_job_error "rank 1's configuration differs from rank 0's" \
  timeout 120 mpirun --oversubscribe -np 1 "$LT" "${RUN[@]}" : -np 1 "$LT" "${RUN[@]}" --weight-decay 0.1
# A rank that dies mid-run (its loss turns NaN at step 2) ends the whole job.
expect_job_error "training loss is NaN at step 2" \
  timeout 120 mpirun --oversubscribe -np 1 "$LT" "${RUN[@]}" : -np 1 "$LT" "${RUN[@]}" --debug-nan-at-step 2
# A rank that stops early without an error leaves the other waiting in a collective: the
# watchdog ends it after --dist-timeout seconds with one line, never a hang; or the
# first collective the two meet in differs in size and MPI says so (the stopped rank's
# evaluation against the other's per-micro-batch loss).
expect_job_error "rank 1: MPI [a-z_]+ did not finish in 5 s: another rank died or hangs|MPI all_gather: MPI_ERR_TRUNCATE: message truncated" \
  timeout 120 mpirun --oversubscribe -np 1 "$LT" "${RUN[@]}" --dist-timeout 5 --stop-at 2 : -np 1 "$LT" "${RUN[@]}" --dist-timeout 5
# A rank killed from outside (SIGKILL, as the OOM killer does) ends the whole job within bounded
# time, never a hang: mpirun notices the lost process and ends the other rank.
"${MPI[@]}" "$LT" "${BASE[@]}" --batch 8 --steps 100000 --log-every 1000 >"$WORK/killed.out" 2>&1 &
job=$!
ranks=()
for i in $(seq 1 300); do  # up to 30 s for both ranks to start
  mapfile -t ranks < <(pgrep -f -- "^$LT train .*--steps 100000 --log-every 1000")
  [ "${#ranks[@]}" -ge 2 ] && break
  sleep 0.1
done
sleep 2
if [ "${#ranks[@]}" -ge 2 ] && kill -9 "${ranks[1]}" 2>/dev/null; then
  for i in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then
    fail "the job still runs 60 s after a rank was killed"; pkill -9 -f -- "^$LT train .*--steps 100000"
  elif wait "$job"; then fail "the job exited 0 after a rank was killed"; else ok; fi
else
  fail "did not find two ranks to kill one of: ${ranks[*]}"; cat "$WORK/killed.out" >&2; kill "$job" 2>/dev/null
fi
wait "$job" 2>/dev/null
if pgrep -f -- "^$LT train .*--steps 100000" >/dev/null; then fail "a rank outlived the job"; pkill -9 -f -- "^$LT train .*--steps 100000"; else ok; fi
# A batch that does not split over the ranks.
expect_job_error "--batch 9 over 2 ranks.*multiple of 2" "${MPI[@]}" "$LT" "${COMMON[@]}" --batch 9
# Sharded strategies save one consolidated checkpoint too (every rank's optimizer state and
# fsdp's blocks gathered to rank 0), which resumes on any world size and strategy.
for s in zero2 fsdp; do
  expect_ok "${MPI[@]}" "$LT" "${RUN[@]}" --strategy $s --stop-at 3 --save "$WORK/ck_$s" --metrics "$WORK/resumed_$s.jsonl"
  expect_ok "$LT" train --resume "$WORK/ck_$s" --metrics "$WORK/resumed_$s.jsonl"
  same_losses "$WORK/one.jsonl" "$WORK/resumed_$s.jsonl" 1e-5 "$s saved on 2 ranks, resumed on 1"
done
# ... and the other way: a 1-process checkpoint continued by 2 fsdp ranks.
expect_ok "$LT" "${RUN[@]}" --stop-at 3 --save "$WORK/ck_one" --metrics "$WORK/resumed_2.jsonl"
expect_ok "${MPI[@]}" "$LT" train --resume "$WORK/ck_one" --strategy fsdp --metrics "$WORK/resumed_2.jsonl"
same_losses "$WORK/one.jsonl" "$WORK/resumed_2.jsonl" 1e-5 "saved by 1 process, resumed on 2 fsdp ranks"

# --save-sharded: each rank writes its own optimizer-state shard (nothing is gathered), rank 0 the
# weights and the manifest; the checkpoint resumes on one process and on 2 ranks of another strategy.
CK="$WORK/ck_sh"
expect_ok "${MPI[@]}" "$LT" "${RUN[@]}" --strategy zero2 --save-sharded --stop-at 3 --save "$CK" --metrics "$WORK/resumed_sh.jsonl"
if [ -f "$CK/optimizer-00000-of-00002.safetensors" ] && [ -f "$CK/optimizer-00001-of-00002.safetensors" ] &&
   [ -f "$CK/optimizer.index.json" ] && [ -f "$CK/model.safetensors" ] && [ ! -e "$CK/optimizer.safetensors" ] &&
   [ ! -e "$CK.tmp" ]; then ok; else fail "--save-sharded wrote: $(ls "$CK" "$CK.tmp" 2>&1 | tr '\n' ' ')"; fi
cp "$WORK/resumed_sh.jsonl" "$WORK/resumed_sh_fsdp.jsonl"
# (a resumed run saves where the first one did: each continuation starts from its own copy)
cp -r "$CK" "$WORK/ck_sh_1" && cp -r "$CK" "$WORK/ck_sh_2" && cp -r "$CK" "$WORK/ck_sh_orig"
expect_ok "$LT" train --resume "$WORK/ck_sh_1" --save "$WORK/ck_sh_1" --metrics "$WORK/resumed_sh.jsonl"
same_losses "$WORK/one.jsonl" "$WORK/resumed_sh.jsonl" 1e-5 "zero2 --save-sharded on 2 ranks, resumed on 1"
# ... continued by 2 fsdp ranks, which save sharded again over it: the directory is replaced whole.
expect_ok "${MPI[@]}" "$LT" train --resume "$WORK/ck_sh_2" --strategy fsdp --save "$WORK/ck_sh_2" --metrics "$WORK/resumed_sh_fsdp.jsonl"
same_losses "$WORK/one.jsonl" "$WORK/resumed_sh_fsdp.jsonl" 1e-5 "zero2 --save-sharded, resumed on 2 fsdp ranks"
if grep -q '"step": 5' "$WORK/ck_sh_2/trainer_state.json" && [ -f "$WORK/ck_sh_2/optimizer-00001-of-00002.safetensors" ]; then ok; else
  fail "the fsdp continuation did not replace its sharded checkpoint"; fi
CK="$WORK/ck_sh_orig"
# A hostile or damaged manifest is refused in one line, and nothing outside the directory is read.
bad_manifest() {
  rm -rf "$WORK/ck_bad" && cp -r "$CK" "$WORK/ck_bad" && printf '%s' "$1" >"$WORK/ck_bad/optimizer.index.json"
  expect_error 1 "$2" "$LT" train --resume "$WORK/ck_bad"
}
bad_manifest '{"world_size": 2, "files": ["../../etc/passwd", "optimizer-00001-of-00002.safetensors"]}' "optimizer.index.json.*file 0 is not named optimizer-00000-of-00002.safetensors"
bad_manifest '{"world_size": 3, "files": ["optimizer-00000-of-00002.safetensors"]}' "optimizer.index.json.*disagree"
bad_manifest '{"files": 7}' "optimizer.index.json.*needs \"files\""
bad_manifest 'not json' "optimizer.index.json.*not valid JSON"
rm -f "$WORK/ck_bad/optimizer.index.json" && cp "$CK/optimizer.index.json" "$WORK/ck_bad/" && rm "$WORK/ck_bad/optimizer-00001-of-00002.safetensors"
expect_error 1 "optimizer-00001-of-00002.safetensors" "$LT" train --resume "$WORK/ck_bad"
expect_error 2 "--save-sharded with --strategy ddp" "$LT" "${RUN[@]}" --save-sharded --save "$WORK/ck_ddp"
finish
