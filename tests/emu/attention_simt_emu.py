# Run: python3 tests/emu/attention_simt_emu.py  (needs numpy; no GPU).
# Lane-level numpy emulation of attention.cu's SIMT fallback kernels (warp = kRpw rows,
# lanes = 32 partners per chunk), mirroring the CUDA loops, against the float64 reference.
import numpy as np, sys
sys.path.insert(0, __import__('os').path.dirname(__file__))
from attention_mma_emu import reference
kRpw = 4
L32 = np.arange(32)

def fwd(D, q, k, v, mrow, Tq, Tk, causal, scale, out, lse):
    off = Tk - Tq
    for r0 in range(0, Tq, kRpw):
        qs = np.zeros((kRpw, D)); os_ = np.zeros((kRpw, D))
        for r in range(kRpw):
            if r0 + r < Tq: qs[r] = q[r0 + r] * scale
        last = min(r0 + kRpw, Tq) - 1
        kend = min(Tk, last + off + 1) if causal else Tk
        m = np.full(kRpw, -np.inf); l = np.zeros(kRpw)
        for j0 in range(0, max(kend, 0), 32):
            kt = np.zeros((D, 32))
            for j in range(32):
                if j0 + j < Tk: kt[:, j] = k[j0 + j]
            j = j0 + L32
            key_ok = (j < kend) & (np.array([mrow[x] != 0 if (mrow is not None and x < Tk) else True for x in j]))
            s = qs @ kt  # [kRpw, 32]
            alpha = np.zeros(kRpw); ps = np.zeros((kRpw, 32))
            for r in range(kRpw):
                row = r0 + r
                ok = key_ok & (row < Tq) & ((not causal) | (j <= row + off))
                x = np.where(ok, s[r], -np.inf)
                m_new = max(m[r], x.max())
                m_use = 0.0 if m_new == -np.inf else m_new
                alpha[r] = np.exp(m[r] - m_use)
                p = np.exp(x - m_use)
                l[r] = l[r] * alpha[r] + p.sum(); m[r] = m_new; ps[r] = p
            nj = min(32, Tk - j0)
            os_ = os_ * alpha[:, None] + ps[:, :nj] @ v[j0:j0 + nj]
        for r in range(kRpw):
            row = r0 + r
            if row >= Tq: break
            inv = 1 / l[r] if l[r] > 0 else 0
            out[row] = os_[r] * inv
            lse[row] = m[r] + np.log(l[r]) if l[r] > 0 else np.inf

def dkdv(D, q, k, v, do, lse, stash, mrow, Tq, Tk, causal, scale, dk, dv):
    off = Tk - Tq
    for r0 in range(0, Tk, kRpw):
        ks = np.zeros((kRpw, D)); vs = np.zeros((kRpw, D))
        for r in range(kRpw):
            if r0 + r < Tk: ks[r] = k[r0 + r]; vs[r] = v[r0 + r]
        dks = np.zeros((kRpw, D)); dvs = np.zeros((kRpw, D))
        kok = [(r0 + r < Tk) and (mrow is None or mrow[r0 + r] != 0) for r in range(kRpw)]
        ibeg = (max(0, r0 - off) // 32 * 32) if causal else 0
        for i0 in range(ibeg, Tq, 32):
            qt = np.zeros((D, 32)); dot = np.zeros((D, 32))
            for i in range(32):
                if i0 + i < Tq: qt[:, i] = q[i0 + i]; dot[:, i] = do[i0 + i]
            i = i0 + L32
            Lv = np.array([lse[x] if x < Tq else np.inf for x in i])
            dl = np.array([stash[x] if x < Tq else 0.0 for x in i])
            s = ks @ qt; dp = vs @ dot
            ps = np.zeros((kRpw, 32)); dss = np.zeros((kRpw, 32))
            for r in range(kRpw):
                ok = kok[r] & (i < Tq) & ~np.isinf(Lv) & ((not causal) | (r0 + r <= i + off))
                with np.errstate(over='ignore', invalid='ignore'):
                    p = np.where(ok, np.exp(s[r] * scale - np.where(ok, Lv, 0)), 0.0)
                ps[r] = p; dss[r] = p * (dp[r] - dl)
            ni = min(32, Tq - i0)
            dvs += ps[:, :ni] @ dot[:, :ni].T
            dks += dss[:, :ni] @ qt[:, :ni].T
        for r in range(kRpw):
            row = r0 + r
            if row >= Tk: break
            dk[row] = dks[r] * scale; dv[row] = dvs[r]

def dqk(D, q, k, v, do, lse, stash, mrow, Tq, Tk, causal, scale, dq):
    off = Tk - Tq
    for r0 in range(0, Tq, kRpw):
        L = [lse[r0 + r] if r0 + r < Tq else np.inf for r in range(kRpw)]
        delta = [stash[r0 + r] if r0 + r < Tq else 0.0 for r in range(kRpw)]
        qs = np.zeros((kRpw, D)); dos = np.zeros((kRpw, D))
        for r in range(kRpw):
            if r0 + r < Tq: qs[r] = q[r0 + r]; dos[r] = do[r0 + r]
        dqs = np.zeros((kRpw, D))
        last = min(r0 + kRpw, Tq) - 1
        kend = min(Tk, last + off + 1) if causal else Tk
        for j0 in range(0, max(kend, 0), 32):
            kt = np.zeros((D, 32)); vt = np.zeros((D, 32))
            for j in range(32):
                if j0 + j < Tk: kt[:, j] = k[j0 + j]; vt[:, j] = v[j0 + j]
            j = j0 + L32
            key_ok = (j < kend) & (np.array([mrow[x] != 0 if (mrow is not None and x < Tk) else True for x in j]))
            s = qs @ kt; dp = dos @ vt
            ps = np.zeros((kRpw, 32))
            for r in range(kRpw):
                row = r0 + r
                ok = key_ok & (row < Tq) & (not np.isinf(L[r])) & ((not causal) | (j <= row + off))
                with np.errstate(over='ignore', invalid='ignore'):
                    ps[r] = np.where(ok, np.exp(s[r] * scale - (0 if np.isinf(L[r]) else L[r])) * (dp[r] - delta[r]), 0.0)
            nj = min(32, Tk - j0)
            dqs += ps[:, :nj] @ kt[:, :nj].T
        for r in range(kRpw):
            row = r0 + r
            if row >= Tq: break
            dq[row] = dqs[r] * scale

def run(D, Tq, Tk, causal, use_mask, seed):
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((n, D)) for n in (Tq, Tk, Tk, Tq))
    mrow = None
    if use_mask:
        mrow = (rng.random(Tk) > 0.3).astype(np.uint8)
        if Tk > 3: mrow[:3] = 0
    scale = 1 / np.sqrt(D)
    O_ref, lse_ref, dQ_ref, dK_ref, dV_ref = reference(q, k, v, do, mrow, causal, scale)
    out = np.full((Tq, D), np.nan); lse = np.full(Tq, np.nan)
    fwd(D, q, k, v, mrow, Tq, Tk, causal, scale, out, lse)
    stash = (do * out).sum(1)
    dk = np.full((Tk, D), np.nan); dv = np.full((Tk, D), np.nan); dq = np.full((Tq, D), np.nan)
    dkdv(D, q, k, v, do, lse, stash, mrow, Tq, Tk, causal, scale, dk, dv)
    dqk(D, q, k, v, do, lse, stash, mrow, Tq, Tk, causal, scale, dq)
    errs = {}
    for name, a, b in (("O", out, O_ref), ("lse", lse, lse_ref), ("dQ", dq, dQ_ref), ("dK", dk, dK_ref), ("dV", dv, dV_ref)):
        assert not np.isnan(a).any(), f"{name} has NaN"
        fin = np.isfinite(b)
        assert (np.isfinite(a) == fin).all(), f"{name} inf pattern differs"
        errs[name] = float(np.max(np.abs(a[fin] - b[fin]))) if fin.any() else 0.0
    bad = {n: e for n, e in errs.items() if e > 1e-9}
    print(f"SIMT D={D} Tq={Tq} Tk={Tk} causal={causal} mask={use_mask}: " + ("OK" if not bad else f"FAIL {bad}"), flush=True)
    return not bad

if __name__ == "__main__":
    cases = [(64, 64, 64, False, False), (33, 70, 70, True, False), (20, 50, 130, True, True),
             (8, 130, 50, True, True), (3, 100, 37, False, True), (128, 65, 65, False, False),
             (17, 129, 129, True, True), (64, 3, 200, True, False), (2, 33, 97, True, False), (5, 1, 1, True, True)]
    ok = all([run(*c, seed=i) for i, c in enumerate(cases)])
    sys.exit(0 if ok else 1)
