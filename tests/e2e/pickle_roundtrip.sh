# The memory snapshot as Python reads it: the pickle loads with the standard pickle module and
# equals the JSON, and the layout holds what torch.cuda._memory_viz assumes (blocks tile each
# segment; free + internal + allocated bytes add up; frees follow their allocs).
# Skips (exit 0, SKIP) without python3. Uses tests/tools/memory_report_demo next to leantrain.
source "$(dirname "$0")/common.bash" "$@"
if ! command -v python3 >/dev/null; then
  echo "SKIP: python3 not found"
  exit 0
fi
DEMO=$(dirname "$LT")/memory_report_demo
if [ ! -x "$DEMO" ]; then echo "FAIL: $DEMO not built" >&2; exit 1; fi
for i in $(seq 1 300); do echo "line $i: memory is allocated and freed by every op of the step"; done >"$WORK/text.txt"
expect_ok "$DEMO" "$WORK" "$WORK/text.txt"

if python3 - "$WORK/memory.pickle" "$WORK/memory.json" <<'PY'; then ok; else fail "pickle/JSON check"; fi
import json, pickle, sys
snap = pickle.load(open(sys.argv[1], 'rb'))
assert snap == json.load(open(sys.argv[2])), 'pickle and JSON differ'
segs, trace = snap['segments'], snap['device_traces'][0]
assert segs and trace, 'expected live segments and a trace'
allocated = 0
for seg in segs:
    addr, free_ext, free_int, seg_alloc = seg['address'], 0, 0, 0
    for b in seg['blocks']:
        assert b['address'] == addr, 'blocks must tile the segment'
        addr += b['size']
        if b['state'] == 'active_allocated':
            seg_alloc += b['requested_size']
            free_int += b['size'] - b['requested_size']
            allocated += b['size']
            assert b['frames'] and b['frames'][0]['name'].endswith(']'), b
        else:
            free_ext += b['size']
    assert free_ext + free_int + seg_alloc == seg['total_size']  # as _memory_viz.segsum asserts
assert allocated == snap['leantrain']['allocated_bytes']['current']
live = {}
for e in trace:
    a = e['action']
    assert a in ('alloc', 'free_requested', 'free_completed', 'segment_alloc', 'segment_free', 'oom', 'snapshot'), a
    assert isinstance(e['frames'], list) and 'time_us' in e and 'stream' in e
    if a == 'alloc':
        assert e['addr'] not in live
        live[e['addr']] = e['size']
    elif a == 'free_completed':
        assert live.pop(e['addr']) == e['size'], 'free of an unknown block'
assert sum(live.values()) == allocated, 'replaying the trace gives the allocated bytes'
cats = {e['category'] for e in trace}
assert {'parameter', 'gradient', 'optimizer_state', 'activation', 'unknown'} <= cats, cats
print('ok: %d segments, %d trace entries' % (len(segs), len(trace)))
PY

finish
