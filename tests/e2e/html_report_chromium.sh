# The HTML memory report in a real browser: headless Chromium opens the page from disk (no
# network), the page's script runs and marks the chart drawn with its path count, and a
# screenshot shows the category colours. Installs nothing: without /usr/bin/chromium it prints
# SKIP and exits 0. The report comes from a small CPU run: `leantrain train --memory-report`
# once the CLI has it, else tests/tools/memory_report_demo (built next to the leantrain binary).
source "$(dirname "$0")/common.bash" "$@"
CHROMIUM=${LT_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ]; then
  echo "SKIP: $CHROMIUM not found (apt-get install chromium to run this test)"
  exit 0
fi

for i in $(seq 1 300); do echo "line $i: memory is allocated and freed by every op of the step"; done >"$WORK/text.txt"
if "$LT" train --help 2>/dev/null | grep -q -- '--memory-report'; then
  expect_ok "$LT" train --model gpt2-tiny --data "$WORK/text.txt" --steps 2 --batch 4 --seq-len 32 \
    --eval-batches 1 --device cpu --memory-history --memory-report "$WORK/memory.html"
else
  DEMO=$(dirname "$LT")/memory_report_demo
  if [ ! -x "$DEMO" ]; then echo "FAIL: no '$LT train --memory-report' and no $DEMO" >&2; exit 1; fi
  expect_ok "$DEMO" "$WORK" "$WORK/text.txt"
fi
if [ ! -s "$WORK/memory.html" ]; then echo "FAIL: no report written" >&2; exit 1; fi

chromium() {
  local profile
  profile=$(mktemp -d "$WORK/chromium.XXXXXX")
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$profile" \
    --window-size=1200,900 "$@" 2>>"$WORK/chromium.err"
}

# The DOM after the script ran: drawn, 7 category areas + the reserved line laid out.
chromium --dump-dom "file://$WORK/memory.html" >"$WORK/dom.html" || true
ROOT=$(grep -o '<div id="memory-report"[^>]*>' "$WORK/dom.html" || true)
if [ -z "$ROOT" ]; then fail "no report root in the dumped DOM"; tail -5 "$WORK/chromium.err" >&2; fi
attr() { sed -n "s/.* $1=\"\([0-9]*\)\".*/\1/p" <<<"$ROOT"; }
if [ "$(attr data-drawn)" = 1 ]; then ok; else fail "data-drawn is '$(attr data-drawn)', want 1 (did the script run?)"; fi
if [ "$(attr data-paths)" = 8 ]; then ok; else fail "data-paths is '$(attr data-paths)', want 8"; fi
if [ "$(attr data-filled-paths)" -ge 5 ] 2>/dev/null; then ok; else fail "only '$(attr data-filled-paths)' filled paths"; fi
if grep -q 'id="peak-marker"' "$WORK/dom.html"; then ok; else fail "no peak marker"; fi

# The screenshot: large patches of the parameter, optimizer-state and activation colours.
chromium --screenshot="$WORK/shot.png" "file://$WORK/memory.html" >/dev/null || true
if [ ! -s "$WORK/shot.png" ]; then
  fail "no screenshot"
elif command -v python3 >/dev/null; then
  if python3 - "$WORK/shot.png" <<'PY'; then ok; else fail "screenshot lacks the category colours"; fi
import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n'
pos, idat, hdr = 8, b'', None
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b'IHDR': hdr = struct.unpack('>IIBBBBB', body)
    if kind == b'IDAT': idat += body
    pos += 12 + n
w, h, depth, ctype = hdr[:4]
assert depth == 8 and ctype in (2, 6), hdr
bpp = 3 if ctype == 2 else 4
raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line))
    prev = line
counts = {}
for line in rows:
    for x in range(0, stride, bpp):
        px = line[x:x + 3]
        counts[px] = counts.get(px, 0) + 1
want = {'parameter': '4e79a7', 'optimizer_state': '59a14f', 'activation': 'e15759'}
bad = [name for name, hexc in want.items() if counts.get(bytes.fromhex(hexc), 0) < 500]
print('colour pixels:', {name: counts.get(bytes.fromhex(hexc), 0) for name, hexc in want.items()})
sys.exit(1 if bad else 0)
PY
fi

finish
