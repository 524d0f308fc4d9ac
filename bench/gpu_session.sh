#!/usr/bin/env bash
# One device call that runs every GPU check and bench we have, in order, each with its own
# time limit, logs under $OUT. Run from the repo root on the GPU machine with prebuilt binaries
# in $BUILD (default build-gpu: the stripped executables copied from a CUDA build; nothing is
# built there). Sections: tests, parity, masks, parity_models, dpo, packing, padding_idx, gemma_diag, throughput, cli, ladder, plan, sweep, gaps, cost, accuracy, ckpt, nf4, offload, offload_dir, dist2, distn, distkill, lora, qlora, longctx, qwen35, moe_tests, gemma3_long, moe (pass a
# subset as arguments; default: tests parity throughput).
set -u
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/leantrain-gpu}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
sections=${*:-tests parity throughput}
# COMMIT: the commit the binaries were built from (the GPU machine's copy of the tree may not know it)
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "gpu: $gpu, commit: $commit, sections: $sections"

for s in $sections; do
  case $s in
    tests)
      BUILD=$BUILD OUT=$OUT timeout 420 bash tests/gpu/run_gpu_checks.sh 2>&1 | tail -60
      ;;
    parity)
      timeout 400 python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT" --commit "$commit" ${PARITY_ARGS:-} 2>&1 | tail -30
      ;;
    throughput)
      # leantrain and PyTorch alternate, two rounds, same GPU, same config.
      : > "$OUT/throughput.jsonl"
      for round in 1 2; do
        # bf16-mixed as BENCHMARKS.md: f32 parameters and AdamW state, bf16 compute (autocast).
        timeout 180 "./$BUILD/leantrain_bench" throughput --device cuda --model gpt2-124m --precision bf16-mixed \
          --batch 16 --seq 1024 --warmup 5 --steps 20 2>&1 | tail -3 | tee -a "$OUT/throughput.jsonl"
        # The same with the blocks keeping their norm and GELU outputs (train's --no-lean-saves).
        timeout 180 "./$BUILD/leantrain_bench" throughput --device cuda --model gpt2-124m --precision bf16-mixed \
          --batch 16 --seq 1024 --warmup 5 --steps 20 --lean-saves 0 2>&1 | tail -1 | sed 's/^{/{"lean_saves": 0, /' |
          tee -a "$OUT/throughput.jsonl"
        [ "$round" = 1 ] && timeout 180 "./$BUILD/leantrain_bench" throughput --device cuda --model gpt2-124m \
          --precision bf16-true --master-weights fp32 --batch 16 --seq 1024 --warmup 5 --steps 20 2>&1 | tail -3 |
          tee -a "$OUT/throughput.jsonl"
        timeout 300 python3 bench/peers/gpt2_throughput_torch.py 2>&1 | tail -1 | tee -a "$OUT/throughput.jsonl"
        [ "$round" = 1 ] && timeout 400 python3 bench/peers/gpt2_throughput_torch.py --compile 2>&1 | tail -1 | tee -a "$OUT/throughput.jsonl"
      done
      ;;
    llama)
      # Issue 12's throughput line: TinyLlama-1.1B shape, B4 x T1024, bf16-mixed, checkpointed blocks,
      # AdamW, one GPU; leantrain (the CLI on random tokens, its plan first) and the PyTorch peers
      # (plain autocast + fused AdamW, and FSDP2 fully_shard as the issue measured it), alternating.
      F="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --checkpoint blocks --fused-step"
      timeout 120 "./$BUILD/leantrain" plan $F --json > "$OUT/tinyllama-plan.json" 2>&1; tail -c 400 "$OUT/tinyllama-plan.json"; echo
      : > "$OUT/llama-throughput.jsonl"
      for round in 1 2; do
        timeout 240 "./$BUILD/leantrain" train $F --device cuda --steps 15 --eval-batches 1 --log-every 5 \
          --metrics-json "$OUT/tinyllama-run$round.json" 2>&1 | tail -4
        python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({'system': 'leantrain', 'tokens_per_s': round(j['steady_items_per_s']), 'peak_allocated': j['peak_allocated_bytes'], 'peak_reserved': j['peak_reserved_bytes']}))" \
          "$OUT/tinyllama-run$round.json" | tee -a "$OUT/llama-throughput.jsonl"
        timeout 240 python3 bench/peers/llama_throughput_torch.py --mode plain 2>&1 | tail -1 | tee -a "$OUT/llama-throughput.jsonl"
        [ "$round" = 1 ] && timeout 240 python3 bench/peers/llama_throughput_torch.py --mode fsdp 2>&1 | tail -1 | tee -a "$OUT/llama-throughput.jsonl"
      done
      ;;
    offload)
      # Issue 14: TinyLlama-1.1B shape, B4 x T1024, bf16, checkpointed blocks, AdamW. leantrain
      # --offload optimizer and --offload params (plan first, then 6 steps; tokens/s, device and
      # pinned-host peaks, host RSS) against PyTorch FSDP2 + CPUOffloadPolicy(pin_memory=True) on
      # one GPU; then the host AdamW kernel against torch.optim.AdamW(foreach) on the CPU, same
      # 1.1B elements, every core. All lines in $OUT/offload.jsonl.
      F="--model tinyllama-1.1b --data synthetic --precision bf16-true --checkpoint blocks --batch 4 --seq-len 1024"
      : > "$OUT/offload.jsonl"
      for mode in optimizer params; do
        timeout 300 "./$BUILD/leantrain" plan $F --offload $mode --json > "$OUT/offload-plan-$mode.json" 2>&1
        python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({'system': 'leantrain-plan', 'offload': sys.argv[2], 'peak_allocated': j['peak_allocated_bytes'], 'peak_reserved': j['peak_reserved_bytes'], 'peak_pinned_host': j['peak_pinned_host_bytes'], 'categories_peak': j['categories_peak'], 'pinned_host_categories_peak': j['pinned_host_categories_peak']}))" \
          "$OUT/offload-plan-$mode.json" $mode 2>&1 | tee -a "$OUT/offload.jsonl"
        timeout 500 python3 bench/peers/leantrain_offload_run.py --label "leantrain-offload-$mode" \
          --metrics "$OUT/offload-$mode.json" -- "./$BUILD/leantrain" train $F --offload $mode --device cuda --steps 6 \
          --eval-batches 1 --log-every 1 --metrics-json "$OUT/offload-$mode.json" 2>&1 | tail -9 | tee -a "$OUT/offload.jsonl"
      done
      # Where each mode's step time goes (LEANTRAIN_OFFLOAD_TRACE=1: one line per step, phases in ms).
      for mode in optimizer params; do
        LEANTRAIN_OFFLOAD_TRACE=1 timeout 300 "./$BUILD/leantrain" train $F --offload $mode --device cuda --steps 5 \
          --eval-batches 1 --log-every 1 2>&1 | grep '^offload trace' | sed "s/^/$mode: /" | tee "$OUT/offload-trace-$mode.txt"
      done
      timeout 500 python3 bench/peers/offload_torch.py 2>&1 | tail -1 | tee -a "$OUT/offload.jsonl"
      timeout 400 python3 bench/peers/cpu_adamw_torch.py 2>&1 | tail -1 | tee -a "$OUT/offload.jsonl"
      # The host step with the defaults (streaming stores for the 16-bit copy: 2; prefetch 512
      # elements ahead), then with each knob changed alone (0: no streaming, 1: streaming every
      # output; prefetch 0, 256, 1024).
      for knobs in "2 512" "0 512" "1 512" "2 0" "2 256" "2 1024"; do
        read -r nt pf <<< "$knobs"
        for g in "--grad f32 --out none" "--grad bf16 --out bf16"; do
          LEANTRAIN_HOST_STREAM_STORES=$nt LEANTRAIN_HOST_PREFETCH=$pf timeout 300 "./$BUILD/leantrain_bench" host_step \
            --optimizer adamw --elements 1100048384 --steps 3 $g 2>&1 | tail -1 |
            sed "s/}\$/, \"stream_stores\": $nt, \"prefetch\": $pf}/" | tee -a "$OUT/offload.jsonl"
        done
      done
      ;;
    qlora)
      # Issue 15, QLoRA. TinyLlama-1.1B shape, B4 x T1024, r 64 alpha 16 on all linear layers, checkpointed
      # blocks: leantrain --quantize nf4 (plan, then two runs) against PEFT LoRA on a bf16 base (its default
      # and its fastest form) in the same call. Then the Llama-3-8B shape (random weights quantised at
      # load), B2 x T2048, with the switches a user adds (8-bit adapter state, activation offload, and
      # $QLORA_EXTRA, e.g. --loss-chunk): plan, then 5 steps. Rows in $OUT/qlora.jsonl.
      summary() {  # label metrics.json -> one JSON line
        python3 -c "import json,sys; j=json.load(open(sys.argv[2])); print(json.dumps({'system': sys.argv[1], 'tokens_per_s': round(j.get('steady_items_per_s', 0)), 'peak_allocated': j['peak_allocated_bytes'], 'peak_reserved': j['peak_reserved_bytes'], 'categories_peak': j['categories_peak'], 'peak_pinned_host': j.get('peak_pinned_host_bytes')}))" "$1" "$2" 2>&1
      }
      plan_row() {  # label plan.json -> one JSON line
        python3 -c "import json,sys; j=json.load(open(sys.argv[2])); print(json.dumps({'system': sys.argv[1], 'peak_allocated': j['peak_allocated_bytes'], 'peak_reserved': j['peak_reserved_bytes'], 'categories_peak': j['categories_peak']}))" "$1" "$2" 2>&1
      }
      F="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-true --lora-rank 64 --lora-alpha 16 --checkpoint blocks --quantize nf4 ${QLORA_EXTRA:-}"
      : > "$OUT/qlora.jsonl"
      timeout 120 "./$BUILD/leantrain" plan $F --json > "$OUT/qlora-plan.json" 2>"$OUT/qlora-plan.err"
      plan_row leantrain-qlora-plan "$OUT/qlora-plan.json" | tee -a "$OUT/qlora.jsonl"
      for round in 1 2; do
        timeout 240 "./$BUILD/leantrain" train $F --device cuda --steps 15 --eval-batches 1 --log-every 5 \
          --metrics-json "$OUT/qlora-run$round.json" > "$OUT/qlora-run$round.log" 2>&1
        summary leantrain-qlora "$OUT/qlora-run$round.json" | tee -a "$OUT/qlora.jsonl"
        timeout 240 python3 bench/peers/lora_throughput_torch.py 2>&1 | tail -1 | tee -a "$OUT/qlora.jsonl"
        [ "$round" = 1 ] && timeout 240 python3 bench/peers/lora_throughput_torch.py --adapter-dtype bf16 --no-autocast \
          2>&1 | tail -1 | tee -a "$OUT/qlora.jsonl"
      done
      F8="--model llama3-8b --data synthetic --batch 2 --seq-len 2048 --precision bf16-true --quantize nf4 --lora-rank 64 --lora-alpha 16 --checkpoint blocks --optimizer adamw8bit --offload-activations ${QLORA_EXTRA:-}"
      timeout 120 "./$BUILD/leantrain" plan $F8 --json > "$OUT/qlora8b-plan.json" 2>"$OUT/qlora8b-plan.err"
      plan_row leantrain-qlora-8b-plan "$OUT/qlora8b-plan.json" | tee -a "$OUT/qlora.jsonl"
      timeout 420 "./$BUILD/leantrain" train $F8 --device cuda --steps 5 --eval-batches 1 --log-every 1 \
        --metrics-json "$OUT/qlora8b-run.json" > "$OUT/qlora8b-run.log" 2>&1
      summary leantrain-qlora-8b "$OUT/qlora8b-run.json" | tee -a "$OUT/qlora.jsonl"
      tail -3 "$OUT/qlora8b-run.log"
      ;;
    offload_dir)
      # Issue 14's disk tier: the drive's sequential write and read (dd, O_DIRECT, 4 GiB each), then
      # TinyLlama-1.1B shape, B4 x T1024, bf16-true, checkpointed blocks, AdamW with
      # --offload optimizer --offload-dir and a host limit below the state's 13.2 GB: plan, then
      # $DISK_STEPS steps with the trace (per step: bytes the disk tier moved and its rate while the
      # drive was busy), plan vs measured (device, pinned host, disk).
      D=${DISK_DIR:-/tmp/leantrain-nvme}
      mkdir -p "$D"
      df -hT "$D" | tail -1
      dd if=/dev/zero of="$D/seq" bs=64M count=64 oflag=direct conv=fsync 2>&1 | tail -1 | sed 's/^/dd write: /'
      dd if="$D/seq" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1 | sed 's/^/dd read: /'
      rm -f "$D/seq"
      F="--model tinyllama-1.1b --data synthetic --precision bf16-true --checkpoint blocks --batch 4 --seq-len 1024 --offload optimizer --offload-dir $D --host-memory-limit ${DISK_LIMIT:-4GiB}"
      timeout 120 "./$BUILD/leantrain" plan $F --json > "$OUT/offload-dir-plan.json" 2>"$OUT/offload-dir-plan.err"
      LEANTRAIN_OFFLOAD_TRACE=1 timeout ${DISK_TIMEOUT:-300} "./$BUILD/leantrain" train $F --device cuda \
        --steps ${DISK_STEPS:-4} --eval-batches 1 --log-every 1 --metrics-json "$OUT/offload-dir-run.json" \
        --metrics "$OUT/offload-dir-losses.jsonl" > "$OUT/offload-dir-run.log" 2>&1
      echo "exit $?"
      grep -E "^offload (disk|trace)|final|error" "$OUT/offload-dir-run.log" | tail -14
      # The same run with the state in host memory: the loss curve must be the same bits.
      F0="--model tinyllama-1.1b --data synthetic --precision bf16-true --checkpoint blocks --batch 4 --seq-len 1024 --offload optimizer"
      timeout ${DISK_REF_TIMEOUT:-150} "./$BUILD/leantrain" train $F0 --device cuda --steps ${DISK_STEPS:-4} --eval-batches 1 \
        --log-every 1 --metrics "$OUT/offload-host-losses.jsonl" > "$OUT/offload-host-run.log" 2>&1
      echo "host-state run exit $?"
      if cmp -s <(grep '"loss"' "$OUT/offload-dir-losses.jsonl" | sed 's/, "seconds": [0-9.e+-]*//') \
                <(grep '"loss"' "$OUT/offload-host-losses.jsonl" | sed 's/, "seconds": [0-9.e+-]*//'); then
        echo "loss curves: identical ($(grep -c '"loss"' "$OUT/offload-dir-losses.jsonl") steps)"
      else
        echo "loss curves: DIFFER"; grep '"loss"' "$OUT/offload-dir-losses.jsonl" "$OUT/offload-host-losses.jsonl" | head -12
      fi
      python3 - "$OUT/offload-dir-plan.json" "$OUT/offload-dir-run.json" <<'PY' | tee "$OUT/offload-dir.jsonl"
import json, sys
p, r = (json.load(open(f)) for f in sys.argv[1:3])
for name, j in (("plan", p), ("run", r)):
    print(json.dumps({"system": "leantrain-offload-dir-" + name, "peak_allocated": j["peak_allocated_bytes"],
                      "peak_reserved": j["peak_reserved_bytes"], "peak_pinned_host": j["peak_pinned_host_bytes"],
                      "peak_disk": j["peak_disk_bytes"], "tokens_per_s": round(j.get("steady_items_per_s", 0)),
                      "pinned_host_categories_peak": j["pinned_host_categories_peak"]}))
PY
      ;;
    dist2)
      # Issue 13, first run on two GPUs (a binary built with -DLEANTRAIN_NCCL=ON): every strategy on
      # gpt2-tiny in f32 against the one-GPU run of the same global batch (losses within 1e-5
      # relative), then GPT-2 124M bf16-mixed, 16 x 1024 tokens per GPU, one GPU against ddp on two.
      export NCCL_NVLS_ENABLE=0
      G="--model gpt2-tiny --data synthetic --batch 8 --steps 12 --log-every 1 --eval-batches 1 --device cuda"
      timeout 60 "./$BUILD/leantrain" train $G --metrics "$OUT/d1.jsonl" > "$OUT/d1.log" 2>&1; echo "1 GPU: exit $?"
      for s in ${DIST_STRATEGIES:-ddp zero1 zero2 fsdp}; do
        timeout 60 "./$BUILD/leantrain" train $G --devices 2 --strategy $s --metrics "$OUT/d2-$s.jsonl" > "$OUT/d2-$s.log" 2>&1
        echo "2 GPUs $s: exit $?"; grep -E "error|final" "$OUT/d2-$s.log" | head -3
      done
      python3 - "$OUT" ${DIST_STRATEGIES:-ddp zero1 zero2 fsdp} <<'PY'
import json, sys, os
out = sys.argv[1]
def losses(f):
    return [json.loads(l)["loss"] for l in open(f) if '"loss"' in l] if os.path.exists(f) else []
one = losses(out + "/d1.jsonl")
for s in sys.argv[2:]:
    two = losses(out + "/d2-%s.jsonl" % s)
    worst = max((abs(a - b) / abs(a) for a, b in zip(one, two)), default=float("nan"))
    print(json.dumps({"strategy": s, "steps": len(two), "of": len(one), "max_rel_loss_diff_vs_1gpu": worst}))
PY
      T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps ${DIST_STEPS:-10} --log-every 5 --eval-batches 1 --device cuda"
      timeout 120 "./$BUILD/leantrain" train $T --batch 16 --metrics-json "$OUT/t1.json" > "$OUT/t1.log" 2>&1; echo "GPT-2 1 GPU: exit $?"
      timeout 150 "./$BUILD/leantrain" train $T --batch 32 --devices 2 --strategy ddp --metrics-json "$OUT/t2.json" > "$OUT/t2.log" 2>&1
      echo "GPT-2 2 GPUs ddp: exit $?"; grep -E "error|^step|final" "$OUT/t2.log" | tail -3; grep -E "^step" "$OUT/t1.log" | tail -1
      for f in t1 t2; do [ -f "$OUT/$f.json" ] && python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(sys.argv[2], json.dumps({k: j[k] for k in ('steady_items_per_s', 'peak_allocated_bytes', 'peak_reserved_bytes')}))" "$OUT/$f.json" $f; done
      ;;
    distn)
      # Issues 13 and 18 on $DIST_GPUS GPUs (default 2) of one host, side by side with PyTorch
      # launched by torchrun on the same GPUs (bench/peers/dist_torch.py). A binary built with
      # -DLEANTRAIN_NCCL=ON. Losses of every strategy against one GPU (gpt2-tiny, f32, same global
      # batch) and per-rank plan == measured; GPT-2 124M bf16-mixed 16 x 1024 per GPU (1 GPU, ddp,
      # zero2, fsdp; torchrun DDP + torch.compile, FSDP2 bf16 params); TinyLlama-1.1B shape
      # B4 x T1024 per GPU, checkpointed blocks (1 GPU, fsdp; torchrun FSDP2); a rank killed with
      # SIGKILL under the launcher and under two hand-started ranks (the NCCL watchdog).
      export NCCL_NVLS_ENABLE=0
      N=${DIST_GPUS:-2}
      peak() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['peak_allocated_bytes'], j['peak_reserved_bytes'], round(j.get('steady_items_per_s', 0)), j.get('outside_allocator_bytes', '-'))" "$1" 2>/dev/null || echo "- - - -"; }
      # ranks_vs_plan RUN_JSON FLAGS...: every rank's measured peak allocated (rank 0's --metrics-json) against plan --rank r.
      ranks_vs_plan() {
        local j=$1; shift
        local planned=""
        for r in $(seq 0 $((N - 1))); do
          planned="$planned $(timeout 120 "./$BUILD/leantrain" plan "$@" --rank $r --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['peak_allocated_bytes'])" 2>/dev/null || echo -1)"
        done
        python3 -c "import json,sys; m=json.load(open(sys.argv[1])).get('rank_peak_allocated_bytes', []); p=[int(x) for x in sys.argv[2:]]; print('  per rank measured', m, 'plan', p, 'equal' if m == p else 'DIFFER', 'max GiB %.3f' % (max(m) / 2**30 if m else -1))" "$j" $planned
      }
      if [ "${DISTN_PART:-all}" != llama ]; then
      G="--model gpt2-tiny --data synthetic --batch 8 --steps 12 --log-every 1 --eval-batches 1"
      timeout 60 "./$BUILD/leantrain" train $G --device cuda --metrics "$OUT/d1.jsonl" > "$OUT/d1.log" 2>&1; echo "gpt2-tiny 1 GPU: exit $?"
      for s in ddp zero1 zero2 fsdp fsdp-ckpt; do
        st=${s%-ckpt}; extra=""; [ "$s" = fsdp-ckpt ] && extra="--checkpoint blocks"
        [ "$s" = fsdp-ckpt ] && timeout 60 "./$BUILD/leantrain" train $G $extra --device cuda --metrics "$OUT/d1-ckpt.jsonl" > /dev/null 2>&1
        timeout 90 "./$BUILD/leantrain" train $G $extra --device cuda --devices $N --strategy $st --metrics "$OUT/dn-$s.jsonl" \
          --metrics-json "$OUT/dn-$s.json" > "$OUT/dn-$s.log" 2>&1
        echo "gpt2-tiny $N GPUs $s: exit $?"; grep -E "error" "$OUT/dn-$s.log" | head -3
        timeout 120 "./$BUILD/leantrain" plan $G $extra --devices $N --strategy $st --json > "$OUT/pn-$s.json" 2>/dev/null
        echo "  $s rank 0 measured (alloc reserved): $(peak "$OUT/dn-$s.json") plan: $(peak "$OUT/pn-$s.json")"
        ranks_vs_plan "$OUT/dn-$s.json" $G $extra --device cuda --devices $N --strategy $st
      done
      python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
def losses(f):
    return [json.loads(l)["loss"] for l in open(f) if '"loss"' in l and "eval_loss" not in l] if os.path.exists(f) else []
for s in ("ddp", "zero1", "zero2", "fsdp", "fsdp-ckpt"):
    one = losses(out + ("/d1-ckpt.jsonl" if s == "fsdp-ckpt" else "/d1.jsonl"))
    n = losses(out + "/dn-%s.jsonl" % s)
    worst = max((abs(a - b) / abs(a) for a, b in zip(one, n)), default=float("nan"))
    print(json.dumps({"strategy": s, "steps": len(n), "of": len(one), "max_rel_loss_diff_vs_1gpu": worst}))
PY
      T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps ${DIST_STEPS:-20} --log-every 10 --eval-batches 1 --device cuda"
      timeout 120 "./$BUILD/leantrain" train $T --batch 16 --metrics-json "$OUT/g1.json" > "$OUT/g1.log" 2>&1
      echo "GPT-2 1 GPU (alloc reserved tok/s): $(peak "$OUT/g1.json")"
      for s in ${DIST_STRATEGIES:-ddp zero2 fsdp}; do
        timeout 150 "./$BUILD/leantrain" train $T --batch $((16 * N)) --devices $N --strategy $s --metrics-json "$OUT/gn-$s.json" > "$OUT/gn-$s.log" 2>&1
        echo "GPT-2 $N GPUs $s: exit $? rank 0 (alloc reserved tok/s): $(peak "$OUT/gn-$s.json")"; grep error "$OUT/gn-$s.log" | head -2
        timeout 120 "./$BUILD/leantrain" plan $T --batch $((16 * N)) --devices $N --strategy $s --json > "$OUT/gpn-$s.json" 2>/dev/null
        echo "  plan: $(peak "$OUT/gpn-$s.json")"
        ranks_vs_plan "$OUT/gn-$s.json" $T --batch $((16 * N)) --devices $N --strategy $s
      done
      # fsdp's blocks gathered as the f32 parameters instead of bf16 copies (the gather before 99ca698).
      timeout 150 "./$BUILD/leantrain" train $T --batch $((16 * N)) --devices $N --strategy fsdp --fsdp-gather f32 \
        --metrics-json "$OUT/gn-fsdp-f32.json" > "$OUT/gn-fsdp-f32.log" 2>&1
      echo "GPT-2 $N GPUs fsdp, f32 gather: exit $? rank 0 (alloc reserved tok/s): $(peak "$OUT/gn-fsdp-f32.json")"
      timeout 300 torchrun --standalone --nproc_per_node $N bench/peers/dist_torch.py --model gpt2 --mode ddp --compile 2>&1 | grep '^{' | tee -a "$OUT/peers.jsonl"
      timeout 200 torchrun --standalone --nproc_per_node $N bench/peers/dist_torch.py --model gpt2 --mode fsdp2 2>&1 | grep '^{' | tee -a "$OUT/peers.jsonl"
      fi
      if [ "${DISTN_PART:-all}" != gpt2 ]; then  # DISTN_PART=gpt2|llama splits the section over two calls
      L="--model tinyllama-1.1b --data synthetic --seq-len 1024 --precision bf16-mixed --checkpoint blocks --steps 10 --log-every 5 --eval-batches 1 --device cuda"
      timeout 150 "./$BUILD/leantrain" train $L --batch 4 --metrics-json "$OUT/l1.json" > "$OUT/l1.log" 2>&1
      echo "TinyLlama 1 GPU (alloc reserved tok/s): $(peak "$OUT/l1.json")"; grep error "$OUT/l1.log" | head -2
      timeout 150 "./$BUILD/leantrain" train $L --batch 4 --fused-step --metrics-json "$OUT/l1f.json" > /dev/null 2>&1
      echo "TinyLlama 1 GPU --fused-step: $(peak "$OUT/l1f.json")"
      timeout 200 "./$BUILD/leantrain" train $L --batch $((4 * N)) --devices $N --strategy fsdp --metrics-json "$OUT/ln.json" > "$OUT/ln.log" 2>&1
      echo "TinyLlama $N GPUs fsdp: exit $? rank 0 (alloc reserved tok/s): $(peak "$OUT/ln.json")"; grep error "$OUT/ln.log" | head -2
      timeout 200 "./$BUILD/leantrain" plan $L --batch $((4 * N)) --devices $N --strategy fsdp --json > "$OUT/lpn.json" 2>/dev/null
      echo "  plan: $(peak "$OUT/lpn.json")"
      ranks_vs_plan "$OUT/ln.json" $L --batch $((4 * N)) --devices $N --strategy fsdp
      timeout 300 torchrun --standalone --nproc_per_node $N bench/peers/dist_torch.py --model tinyllama --mode fsdp2 --batch 4 --checkpoint --steps 10 --warmup 3 2>&1 | grep '^{' | tee -a "$OUT/peers.jsonl"
      fi
      ;;
    distkill)
      # Issue 13: a rank killed with SIGKILL under the launcher, and under two hand-started ranks
      # (the NCCL watchdog, or its sentinel, ends the survivor within --dist-timeout + 10 s).
      export NCCL_NVLS_ENABLE=0
      N=${DIST_GPUS:-2}
      # A rank killed from outside: the launcher ends the others and says which rank died.
      K="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps 100000 --log-every 50 --device cuda"
      "./$BUILD/leantrain" train $K --batch $((16 * N)) --devices $N --strategy ddp > "$OUT/kill.log" 2>&1 &
      Lpid=$!; sleep 20
      nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader | sort -k2
      victim=$(pgrep -P $Lpid | tail -1); kill -9 $victim; t0=$(date +%s.%N)
      for i in $(seq 1 600); do kill -0 $Lpid 2>/dev/null || break; sleep 0.1; done
      kill -0 $Lpid 2>/dev/null && { echo "HANG: the launcher still runs 60 s after the kill"; pkill -9 -x leantrain; }
      wait $Lpid; rc=$?; t1=$(date +%s.%N)
      echo "killed rank (launcher): exit $rc after $(python3 -c "print(round($t1 - $t0, 1))") s; leantrain processes left: $(pgrep -c -x leantrain)"
      grep '^leantrain: error' "$OUT/kill.log"
      # Two ranks started by hand (as a launcher that does not watch them would): the survivor's NCCL
      # watchdog ends it within --dist-timeout.
      port=$((29600 + RANDOM % 100))
      for r in 0 1; do
        env RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          "./$BUILD/leantrain" train $K --batch 32 --strategy ddp --dist-timeout 15 > "$OUT/kill-r$r.log" 2>&1 &
        eval "P$r=\$!"
      done
      sleep 25; kill -9 $P1; t0=$(date +%s.%N)
      for i in $(seq 1 600); do kill -0 $P0 2>/dev/null || break; sleep 0.1; done
      if kill -0 $P0 2>/dev/null; then
        echo "HANG: rank 0 still runs 60 s after rank 1 was killed; its threads:"
        timeout 60 /usr/local/cuda/bin/cuda-gdb -p $P0 -batch -ex "thread apply all bt 12" 2>&1 | grep -E "^Thread|^#" | head -80
        kill -9 $P0
      fi
      wait $P0; rc=$?; t1=$(date +%s.%N)
      echo "killed rank 1 (no launcher): rank 0 exit $rc after $(python3 -c "print(round($t1 - $t0, 1))") s"
      grep '^leantrain: error' "$OUT/kill-r0.log"
      ;;
    longctx)
      # Issue 15: the longest context at batch 1 under a 24 GiB budget, Llama-3.1-8B shape QLoRA
      # (random weights quantised at load), r 64 on all linear layers, checkpointed, 8-bit adapter
      # state, activation offload, chunked loss. $LONGCTX_T is what `leantrain plan ... --budget
      # 24GiB --maximize seq-len` answered on the dev machine (the same dry run); plan, then 2 steps.
      T=${LONGCTX_T:-65536}
      F="--config bench/configs/llama3.1-8b.json --data synthetic --batch 1 --seq-len $T --precision bf16-true --quantize nf4 --lora-rank 64 --lora-alpha 16 --checkpoint blocks --optimizer adamw8bit --offload-activations --loss-chunk 4096"
      timeout 120 "./$BUILD/leantrain" plan $F --json > "$OUT/longctx-plan.json" 2>"$OUT/longctx-plan.err"
      timeout 500 "./$BUILD/leantrain" train $F --device cuda --steps 2 --eval-batches 1 --log-every 1 \
        --metrics-json "$OUT/longctx-run.json" > "$OUT/longctx-run.log" 2>&1
      python3 - "$OUT/longctx-plan.json" "$OUT/longctx-run.json" "$T" <<'PY' | tee "$OUT/longctx.jsonl"
import json, sys
p, r = (json.load(open(f)) for f in sys.argv[1:3])
for name, j in (("plan", p), ("run", r)):
    print(json.dumps({"system": "leantrain-qlora-longctx-" + name, "seq_len": int(sys.argv[3]),
                      "peak_allocated": j["peak_allocated_bytes"], "peak_reserved": j["peak_reserved_bytes"],
                      "tokens_per_s": round(j.get("steady_items_per_s", 0)), "categories_peak": j["categories_peak"]}))
PY
      grep -E "final|step 2/2" "$OUT/longctx-run.log" | tail -2
      nvidia-smi --query-gpu=memory.total --format=csv,noheader
      ;;
    lora)
      # Issue 15, LoRA on a bf16 base: parity with PEFT (TinyLlama shape, T 128, r 16 alpha 32 on the 7
      # linear names: logits, adapter grads, 50 steps), then throughput side by side, alternating:
      # TinyLlama-1.1B shape, B4 x T1024, r 64 alpha 16 on all linear layers, checkpointed layers,
      # AdamW; leantrain (plan first, then the CLI on random tokens) against PEFT (bf16 base, f32
      # adapters, autocast, fused AdamW).
      timeout 400 python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT" --commit "$commit" --only lora-tinyllama \
        2>&1 | tail -6
      # leantrain's adapter files loaded by PeftModel.from_pretrained; merge against merge_and_unload.
      timeout 200 python3 bench/peers/lora_peft_roundtrip.py --leantrain "./$BUILD/leantrain" --workdir "$OUT/lora-rt" \
        2>&1 | tail -4 | tee "$OUT/lora-peft-roundtrip.jsonl"
      F="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-true --lora-rank 64 --lora-alpha 16 --checkpoint blocks"
      timeout 120 "./$BUILD/leantrain" plan $F --json > "$OUT/lora-plan.json" 2>&1; tail -c 400 "$OUT/lora-plan.json"; echo
      : > "$OUT/lora-throughput.jsonl"
      for round in 1 2; do
        timeout 240 "./$BUILD/leantrain" train $F --device cuda --steps 15 --eval-batches 1 --log-every 5 \
          --metrics-json "$OUT/lora-run$round.json" 2>&1 | tail -4
        python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({'system': 'leantrain-lora', 'tokens_per_s': round(j['steady_items_per_s']), 'peak_allocated': j['peak_allocated_bytes'], 'peak_reserved': j['peak_reserved_bytes']}))" \
          "$OUT/lora-run$round.json" | tee -a "$OUT/lora-throughput.jsonl"
        timeout 240 python3 bench/peers/lora_throughput_torch.py 2>&1 | tail -1 | tee -a "$OUT/lora-throughput.jsonl"
        [ "$round" = 1 ] && timeout 240 python3 bench/peers/lora_throughput_torch.py --adapter-dtype bf16 2>&1 | tail -1 |
          tee -a "$OUT/lora-throughput.jsonl"
        # PEFT at its fastest: bf16 adapters on the bf16 base, no autocast (nothing to cast).
        [ "$round" = 1 ] && timeout 240 python3 bench/peers/lora_throughput_torch.py --adapter-dtype bf16 --no-autocast \
          2>&1 | tail -1 | tee -a "$OUT/lora-throughput.jsonl"
      done
      python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print('lora plan peak_allocated', p.get('peak_allocated_bytes'))" \
        "$OUT/lora-plan.json" 2>&1 | tail -1
      ;;
    nf4)
      # Issue 15: NF4 + double quantisation against the torch re-implementation of bitsandbytes,
      # byte for byte on CPU and CUDA; then CPU vs CUDA on leantrain's own cases.
      timeout 120 python3 bench/peers/nf4_reference.py --out "$OUT/nf4_ref.safetensors" 2>&1 | tail -3
      LT_NF4_REFERENCE="$OUT/nf4_ref.safetensors" timeout 120 "./$BUILD/leantrain_tests" \
        --gtest_filter='QuantNf4*' 2>&1 | tail -25
      # The dequantise pass and nf4_linear forward + backward against a bf16 linear (Llama-3-8B's
      # shapes, 4096 tokens), then a QLoRA step of TinyLlama on the GPU with plan == measured.
      timeout 300 "./$BUILD/leantrain_bench" nf4 --device cuda 2>&1 | tail -4
      ARGS=(--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --steps 3 --eval-batches 1
            --precision bf16-true --checkpoint blocks --quantize nf4 --lora-rank 64 --lora-alpha 16)
      timeout 120 "./$BUILD/leantrain" plan "${ARGS[@]}" --json > "$OUT/qlora-plan.json" 2>&1
      timeout 300 "./$BUILD/leantrain" train "${ARGS[@]}" --device cuda --metrics-json "$OUT/qlora-run.json" 2>&1 | tail -3
      python3 -c "import json,sys; p,r=(json.load(open(f)) for f in sys.argv[1:]); print('qlora plan', p['peak_allocated_bytes'], 'run', r['peak_allocated_bytes'])" \
        "$OUT/qlora-plan.json" "$OUT/qlora-run.json" 2>&1 | tail -1
      ;;
    hf)
      timeout 400 python3 bench/peers/hf_roundtrip.py --leantrain "./$BUILD/leantrain" --workdir "$OUT/hf" 2>&1 | tail -30
      rm -rf "$OUT/hf"
      ;;
    cli)
      # The CLI on the GPU: the demo (ViT on Fashion-MNIST) and a GPT-2 on fortunes, with the
      # progress lines and the memory table; then generation from the saved GPT.
      timeout 240 "./$BUILD/leantrain" train --device cuda --log-every 100 2>&1 | tail -32 | tee "$OUT/demo-cuda.log"
      timeout 200 "./$BUILD/leantrain" train --device cuda --model gpt2-tiny --data fortunes --steps 300 --batch 32 \
        --lr 2e-3 --warmup 30 --precision bf16-mixed --save "$OUT/gpt" --log-every 100 2>&1 | tail -30 | tee "$OUT/gpt-cuda.log"
      timeout 60 "./$BUILD/leantrain" generate --checkpoint "$OUT/gpt" --prompt "The " --max-new-tokens 120 --top-k 40 \
        2>&1 | tail -8 | tee -a "$OUT/gpt-cuda.log"
      rm -rf "$OUT/gpt"
      ;;
    ladder)
      BUILD=$BUILD OUT=$OUT timeout 560 bash bench/ladder.sh 2>&1 | tail -25
      # The plot (README's ladder figure): $OUT/ladder.svg from the JSON lines just written.
      python3 bench/plot_ladder.py "$OUT/ladder.jsonl" --gpu "$gpu" --commit "$commit" \
        --pytorch-label "PyTorch $(python3 -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" \
        -o "$OUT/ladder.svg" 2>&1 | tail -2
      ;;
    accuracy)
      # Accuracy through the ladder's techniques (vit-tiny on Fashion-MNIST, same seed, same
      # effective batch; sized for under 5 minutes on an H200, not yet timed there):
      # $OUT/accuracy_ladder.{jsonl,md}, logs in $OUT/acc/.
      BUILD=$BUILD OUT=$OUT DEVICE=${DEVICE:-cuda} timeout 570 bash bench/accuracy_ladder.sh 2>&1 | tail -25
      ;;
    masks)
      # Issue 44 / 48 kernels: attention with a sliding window or packed documents, rotary with
      # per-token positions, Gemma 3's unit-offset RMSNorm and GeGLU, the Qwen3 / Gemma 3 models,
      # each CUDA case against the CPU reference; then the masked attention's time against causal.
      timeout 300 "./$BUILD/leantrain_tests" --gtest_color=no --gtest_brief=1 \
        --gtest_filter='AttentionWindow.*:RopePositions.*:AttentionGqa.*:AttentionPacked.*:BlockSparseAttention.*:LlamaRope.*:*OpsBackends*geglu*:*OpsBackends*unit_offset*:GemmaKernels.*:Gemma3*:LlamaModel.*:LlamaConfig.*:-AttentionWindow.CudaTimeWindowVsCausalT8192' 2>&1 | grep -v "Skipped\|no CUDA" | tail -30
      timeout 120 "./$BUILD/leantrain_tests" --gtest_color=no --gtest_filter=AttentionWindow.CudaTimeWindowVsCausalT8192 2>&1 | grep -E "time attention|OK|FAILED|Failure" | head -12
      ;;
    parity_models)
      # Issue 44: qwen3, gemma3_text (a window shorter than T), mistral with a window, small and real-size.
      # Every small case (the existing ones too, --quick), then the new families at real size.
      timeout 330 python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT" --commit "$commit" --quick 2>&1 | tail -40
      timeout 240 python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT/real" --commit "$commit" \
        --only qwen3-1.7b,gemma3-1b --dtypes bf16 2>&1 | tail -20
      ;;
    dpo)
      # Issue 48: DPO against a PyTorch implementation of TRL's losses on transformers models (loss,
      # rewards, gradients; f32 and bf16; LoRA and full fine-tunes; the CLI end to end).
      timeout 450 python3 bench/peers/dpo_torch.py --bench "$BUILD/leantrain_bench" --leantrain "$BUILD/leantrain" \
        --out "$OUT" --commit "$commit" 2>&1 | grep -v Warning | tail -20
      ;;
    packing)
      # Issue 48: text tokens/s of --packing none, docs and concat on a length-skewed set (GPT-2 124M).
      BUILD=$BUILD OUT=$OUT/packing ROUNDS=${PACKING_ROUNDS:-2} COMMIT=$commit timeout 450 bash bench/packing.sh 2>&1 | tail -12
      ;;
    padding_idx)
      # What transformers builds as each decoder's embed_tokens.padding_idx (leantrain follows it).
      timeout 120 python3 -c "
import transformers as tf
for name, cfg in [('llama', tf.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)),
                  ('llama pad 5', tf.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, pad_token_id=5)),
                  ('qwen3', tf.Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8)),
                  ('mistral', tf.MistralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)),
                  ('gemma3_text', tf.Gemma3TextConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8)),
                  ('qwen3_5_text', tf.Qwen3_5TextConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8, linear_num_key_heads=1, linear_key_head_dim=8, linear_num_value_heads=1, linear_value_head_dim=8)),
                  ('qwen3_moe', tf.Qwen3MoeConfig(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_experts=4, num_experts_per_tok=2, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8)),
                  ('mixtral', tf.MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_local_experts=4, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))]:
    m = tf.AutoModelForCausalLM.from_config(cfg)
    e = m.get_input_embeddings()
    print(name, 'pad_token_id', cfg.pad_token_id, 'padding_idx', e.padding_idx, 'row zero', bool((e.weight[e.padding_idx] == 0).all()) if e.padding_idx is not None else None)
" 2>&1 | grep -v Warning | tail -10
      ;;
    gemma_diag)
      # Issue 44: where Gemma 3's f32 curve leaves PyTorch's (steps 0 and 1 agree, step 2 does not):
      # the gradients of step 2 and the parameters after it, the five worst of each, relative.
      timeout 200 python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT/diag" --commit "$commit" \
        --only gemma3-small,llama-small --dtypes f32 --dump-step 2 2>&1 | tail -4
      ;;
    plan)
      LT=$BUILD/leantrain OUT=$OUT timeout 560 bash bench/plan_vs_measured.sh 2>&1 | tail -25
      ;;
    sweep)
      # Issue 42: N random configurations per seed, each planned and run; one line each, a summary
      # (SWEEP_SEEDS, default "1"; SWEEP_N, default 60).
      for seed in ${SWEEP_SEEDS:-1}; do
        BUILD=$BUILD OUT=$OUT COMMIT=$commit timeout 580 bash bench/plan_sweep.sh "$seed" "${SWEEP_N:-60}" 2>&1 | tail -80
      done
      ;;
    gaps)
      # The runs issue 42 found off their plans, each traced on both sides (bench/plan_trace_gap.sh).
      G="--precision bf16-true --checkpoint blocks"
      BUILD=$BUILD OUT=$OUT/gaps bash bench/plan_trace_gap.sh offload-opt --model tinyllama-1.1b --batch 2 --seq-len 512 $G --offload optimizer --steps 3
      BUILD=$BUILD OUT=$OUT/gaps bash bench/plan_trace_gap.sh offload-params --model tinyllama-1.1b --depth 3 --batch 3 --seq-len 600 $G --offload params --loss-chunk 4096 --steps 3
      BUILD=$BUILD OUT=$OUT/gaps bash bench/plan_trace_gap.sh resnet-16mixed --model resnet50 --batch 24 --micro-batch 8 --precision 16-mixed --optimizer sgd --checkpoint 'layer[23]' --steps 3
      ;;
    cost)
      BUILD=$BUILD OUT=$OUT timeout 560 bash bench/cost_model.sh 2>&1 | tail -25
      ;;
    ckpt)
      # The --checkpoint modes on the GPU: peaks and step times, ViT-L/16 and GPT-2 124M, bf16-mixed.
      BUILD=$BUILD DEVICE=cuda PRECISION=bf16-mixed STEPS=12 MODES="none selective blocks" \
        CASES="vit-l-16|--batch 32
gpt2-124m|--batch 8 --seq-len 1024" timeout 300 bash bench/checkpoint_modes.sh 2>&1 | tee "$OUT/checkpoint_modes.md" | tail -12
      ;;
    qwen35)
      # Issue 44's Qwen3.5 checks (bench/qwen35_lora.sh): QWEN35_PARTS, default "ops parity".
      BUILD=$BUILD OUT=$OUT/qwen35 ROUNDS=${QWEN35_ROUNDS:-1} bash bench/qwen35_lora.sh ${QWEN35_PARTS:-ops parity}
      ;;
    moe_tests)
      # Issue 45's GPU unit tests: the MoE kernels against the CPU (f32, bf16, odd shapes, NF4 experts,
      # run-to-run bits), the models, packed documents through MoE layers, the NF4 module.
      timeout 400 "./$BUILD/leantrain_tests" --gtest_brief=1 \
        --gtest_filter='Moe*:DpoMoe.*:QuantNf4*:PackedDocuments.*' 2>&1 | tail -12
      ;;
    gemma3_long)
      # Issue 44: Gemma-3-1B at T 8192 (LoRA r 16, bf16, checkpointed): sliding layers' attention saves
      # and computes over the 512-token window; plan against measured, and the plan of the same run
      # with every layer full attention (sliding_window = T) for the difference the window makes.
      G="--model gemma3-1b --data synthetic --batch 1 --seq-len 8192 --precision bf16-true --lora-rank 16 --lora-alpha 32 --checkpoint blocks"
      timeout 120 "./$BUILD/leantrain" plan $G --device-type cuda --json > "$OUT/gemma3-long-plan.json" 2>&1
      timeout 240 "./$BUILD/leantrain" train $G --device cuda --steps 8 --eval-batches 0 --log-every 4 \
        --metrics-json "$OUT/gemma3-long-run.json" > "$OUT/gemma3-long-run.log" 2>&1 || tail -4 "$OUT/gemma3-long-run.log"
      python3 -c "
import json, sys
p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(json.dumps({'system': 'leantrain-gemma3-1b-T8192-lora', 'tokens_per_s': round(r['steady_items_per_s']),
                  'peak_allocated': r['peak_allocated_bytes'], 'plan_peak_allocated': p['peak_allocated_bytes'],
                  'peak_reserved': r['peak_reserved_bytes'], 'plan_peak_reserved': p['peak_reserved_bytes'],
                  'peak_equals_plan': r['peak_allocated_bytes'] == p['peak_allocated_bytes'] and r['peak_reserved_bytes'] == p['peak_reserved_bytes']}))
" "$OUT/gemma3-long-plan.json" "$OUT/gemma3-long-run.json" 2>&1 | tee "$OUT/gemma3-long.jsonl"
      ;;
    moe)
      # Issue 45: the MoE parity cases (Qwen3-MoE, Mixtral, aux loss on), then the side by side with
      # transformers + PEFT (Qwen3-30B-A3B shape, 4 layers, LoRA r16 incl. experts) and the QLoRA plan.
      # (three device calls: "moe" alone is too long for one; MOE_PART=parity, bench or qlora runs a
      # third of it: qlora is Qwen3-30B-A3B with NF4 experts, 50 steps, plan vs measured)
      [ "${MOE_PART:-bench}" = parity ] && timeout 560 python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" \
        --out "$OUT" --commit "$commit" --only qwen3-moe-small,qwen3-moe-small-plain,mixtral-small 2>&1 | tail -8
      [ "${MOE_PART:-bench}" = bench ] && BUILD=$BUILD OUT=$OUT/moe-lora ROUNDS=1 timeout 560 bash bench/moe_lora.sh 2>&1 | tail -12
      [ "${MOE_PART:-bench}" = qlora ] && BUILD=$BUILD OUT=$OUT/moe-qlora ROUNDS=0 QLORA=1 timeout 590 bash bench/moe_lora.sh 2>&1 | tail -50
      ;;
  esac
done
echo "gpu_session done"
