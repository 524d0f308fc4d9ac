# Run: python3 tests/emu/attention_mma_emu.py  (needs numpy; Debian: apt-get install python3-numpy). No GPU needed.
# Lane-level numpy emulation of attention.cu's tensor-core kernels (ldmatrix / mma.m16n8k16
# fragment semantics per the PTX ISA), mirroring the CUDA code line by line, to check indexing,
# masking, tails and the online softmax against a float64 reference. Values stay f32 (no bf16
# rounding) so the check is tight.
import numpy as np, itertools, sys

LANES = np.arange(32)
G, T4 = LANES >> 2, LANES & 3
kBQ = kBK = 64
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def frag_a(r0, c0):  # -> (row, col) per lane
    return r0 + (LANES & 7) + ((LANES >> 3) & 1) * 8, c0 + (LANES >> 4) * 8


def frag_bt(n0, c0):
    return n0 + (LANES & 7) + (LANES >> 4) * 8, c0 + ((LANES >> 3) & 1) * 8


def ldsm(tile, addr, trans=False):
    rows, cols = addr
    regs = np.zeros((32, 4, 2), np.float64)
    for i in range(4):
        M = np.stack([tile[rows[8 * i + r], cols[8 * i + r]:cols[8 * i + r] + 8] for r in range(8)])
        assert M.shape == (8, 8)
        for l in range(32):
            g, t = l // 4, l % 4
            if trans:
                regs[l, i] = (M[2 * t, g], M[2 * t + 1, g])
            else:
                regs[l, i] = (M[g, 2 * t], M[g, 2 * t + 1])
    return regs


def mma(d, a, b0, b1):  # d [32,4], a [32,4,2], b0/b1 [32,2]
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for l in range(32):
        g, t = l // 4, l % 4
        for e in range(2):
            A[g, 2 * t + e] = a[l, 0, e]; A[g + 8, 2 * t + e] = a[l, 1, e]
            A[g, 2 * t + 8 + e] = a[l, 2, e]; A[g + 8, 2 * t + 8 + e] = a[l, 3, e]
            B[2 * t + e, g] = b0[l, e]; B[2 * t + 8 + e, g] = b1[l, e]
    C = A @ B
    for l in range(32):
        g, t = l // 4, l % 4
        d[l, 0] += C[g, 2 * t]; d[l, 1] += C[g, 2 * t + 1]
        d[l, 2] += C[g + 8, 2 * t]; d[l, 3] += C[g + 8, 2 * t + 1]


def c_to_a(c0, c1):  # C frags [32,4] x2 -> A [32,4,2]
    a = np.zeros((32, 4, 2))
    a[:, 0] = c0[:, 0:2]; a[:, 1] = c0[:, 2:4]; a[:, 2] = c1[:, 0:2]; a[:, 3] = c1[:, 2:4]
    return a


def tile_load(g, r0, nrows, R, D):
    t = np.zeros((R, D + 8))
    for r in range(R):
        if r0 + r < nrows:
            t[r, :D] = g[r0 + r]
    return t


def store_rows(acc, mul0, mul1, out, row0, nrows, D):
    stage = np.zeros((16, D + 8))
    for dt in range(D // 8):
        for l in range(32):
            g, t = l // 4, l % 4
            stage[g, dt * 8 + 2 * t: dt * 8 + 2 * t + 2] = acc[dt][l, 0:2] * mul0[l]
            stage[g + 8, dt * 8 + 2 * t: dt * 8 + 2 * t + 2] = acc[dt][l, 2:4] * mul1[l]
    for r in range(16):
        if row0 + r < nrows:
            out[row0 + r] = stage[r, :D]


def fwd_block(D, q, k, v, mrow, Tq, Tk, causal, scale, q0, out, lse):
    sl2 = scale * LOG2E
    off = Tk - Tq
    kend = min(Tk, q0 + kBQ + off) if causal else Tk
    ntiles = (kend + kBK - 1) // kBK if kend > 0 else 0
    if ntiles == 0:
        for r in range(q0, min(q0 + kBQ, Tq)):
            out[r] = 0; lse[r] = np.inf
        return
    Qs = tile_load(q, q0, Tq, kBQ, D)
    for warp in range(4):
        r_lo = q0 + warp * 16 + G
        qf = [ldsm(Qs, frag_a(warp * 16, kk * 16)) for kk in range(D // 16)]
        o = [np.zeros((32, 4)) for _ in range(D // 8)]
        m = np.full((32, 2), -np.inf); l = np.zeros((32, 2))
        for j in range(ntiles):
            k0 = j * kBK
            Kb = tile_load(k, k0, Tk, kBK, D); Vb = tile_load(v, k0, Tk, kBK, D)
            ok = np.array([(k0 + i < Tk) and (mrow is None or mrow[k0 + i] != 0) for i in range(kBK)])
            s = [np.zeros((32, 4)) for _ in range(kBK // 8)]
            for kk in range(D // 16):
                for np_ in range(kBK // 16):
                    kb = ldsm(Kb, frag_bt(np_ * 16, kk * 16))
                    mma(s[2 * np_], qf[kk], kb[:, 0], kb[:, 1])
                    mma(s[2 * np_ + 1], qf[kk], kb[:, 2], kb[:, 3])
            need_mask = (mrow is not None) or k0 + kBK > Tk or (causal and k0 + kBK - 1 > q0 + off)
            for nt in range(kBK // 8):
                for e in range(4):
                    x = s[nt][:, e] * sl2
                    if need_mask:
                        kc = nt * 8 + 2 * T4 + (e & 1)
                        row = r_lo + (e >> 1) * 8
                        bad = ~ok[kc] | (causal & (k0 + kc > row + off))
                        x = np.where(bad, -np.inf, x)
                    s[nt][:, e] = x
            for h in range(2):
                mx = np.full(32, -np.inf)
                for nt in range(kBK // 8):
                    mx = np.maximum(mx, np.maximum(s[nt][:, 2 * h], s[nt][:, 2 * h + 1]))
                mx = np.maximum(mx, mx[LANES ^ 1]); mx = np.maximum(mx, mx[LANES ^ 2])
                m_new = np.maximum(m[:, h], mx)
                m_use = np.where(m_new == -np.inf, 0.0, m_new)
                alpha = np.exp2(m[:, h] - m_use)
                m[:, h] = m_new
                rs = np.zeros(32)
                for nt in range(kBK // 8):
                    s[nt][:, 2 * h] = np.exp2(s[nt][:, 2 * h] - m_use)
                    s[nt][:, 2 * h + 1] = np.exp2(s[nt][:, 2 * h + 1] - m_use)
                    rs += s[nt][:, 2 * h] + s[nt][:, 2 * h + 1]
                l[:, h] = l[:, h] * alpha + rs
                for dt in range(D // 8):
                    o[dt][:, 2 * h] *= alpha; o[dt][:, 2 * h + 1] *= alpha
            for kc in range(kBK // 16):
                pa = c_to_a(s[2 * kc], s[2 * kc + 1])
                for dp in range(D // 16):
                    vb = ldsm(Vb, frag_a(kc * 16, dp * 16), trans=True)
                    mma(o[2 * dp], pa, vb[:, 0], vb[:, 1])
                    mma(o[2 * dp + 1], pa, vb[:, 2], vb[:, 3])
        for h in range(2):
            l[:, h] += l[LANES ^ 1, h]; l[:, h] += l[LANES ^ 2, h]
        inv = np.where(l > 0, 1 / np.where(l > 0, l, 1), 0)
        store_rows(o, inv[:, 0], inv[:, 1], out, q0 + warp * 16, Tq, D)
        for lane in range(32):
            if lane % 4 == 0:
                for h in range(2):
                    row = r_lo[lane] + 8 * h
                    if row < Tq:
                        lse[row] = (m[lane, h] + np.log2(l[lane, h])) * LN2 if l[lane, h] > 0 else np.inf


# qs, dos, lses, deltas: one entry per query head of the kv head's group (G = len(qs)); the
# block walks the G * ntq query tiles as one sequence (head n // ntq, tile n % ntq), as the kernel.
def dkdv_block(D, qs, k, v, dos, lses, deltas, mrow, Tq, Tk, causal, scale, k0, dk, dv):
    BQ = 64 if D <= 64 else 32
    sl2 = scale * LOG2E
    off = Tk - Tq
    qbeg = (max(0, k0 - off) // BQ * BQ) if causal else 0
    ntq = (Tq - qbeg + BQ - 1) // BQ if qbeg < Tq else 0
    if ntq == 0:
        for r in range(k0, min(k0 + kBK, Tk)):
            dk[r] = 0; dv[r] = 0
        return
    Ks = tile_load(k, k0, Tk, kBK, D); Vs = tile_load(v, k0, Tk, kBK, D)
    for warp in range(4):
        kr = k0 + warp * 16 + G
        kok = [np.array([(r < Tk) and (mrow is None or mrow[r] != 0) for r in kr]),
               np.array([(r + 8 < Tk) and (mrow is None or mrow[r + 8] != 0) for r in kr])]
        dka = [np.zeros((32, 4)) for _ in range(D // 8)]
        dva = [np.zeros((32, 4)) for _ in range(D // 8)]
        for n in range(len(qs) * ntq):
            gi = n // ntq
            qi0 = qbeg + (n - gi * ntq) * BQ
            q, do, lse, delta = qs[gi], dos[gi], lses[gi], deltas[gi]
            Qb = tile_load(q, qi0, Tq, BQ, D); dOb = tile_load(do, qi0, Tq, BQ, D)
            lse_s = np.array([(lse[r] * LOG2E if not np.isinf(lse[r]) else np.inf) if r < Tq else np.inf
                              for r in range(qi0, qi0 + BQ)])
            dlt_s = np.array([delta[r] if r < Tq else 0.0 for r in range(qi0, qi0 + BQ)])
            st = [np.zeros((32, 4)) for _ in range(BQ // 8)]
            for kk in range(D // 16):
                ka = ldsm(Ks, frag_a(warp * 16, kk * 16))
                for np_ in range(BQ // 16):
                    qb = ldsm(Qb, frag_bt(np_ * 16, kk * 16))
                    mma(st[2 * np_], ka, qb[:, 0], qb[:, 1]); mma(st[2 * np_ + 1], ka, qb[:, 2], qb[:, 3])
            causal_tile = causal and k0 + kBK - 1 > qi0 + off
            for nt in range(BQ // 8):
                for e in range(4):
                    qc = nt * 8 + 2 * T4 + (e & 1)
                    key = kr + (e >> 1) * 8
                    with np.errstate(over='ignore'):
                        p = np.exp2(st[nt][:, e] * sl2 - lse_s[qc])
                    bad = ~kok[e >> 1] | (causal_tile & (key > qi0 + qc + off))
                    st[nt][:, e] = np.where(bad, 0.0, p)
            for kc in range(BQ // 16):
                pa = c_to_a(st[2 * kc], st[2 * kc + 1])
                for dp in range(D // 16):
                    b4 = ldsm(dOb, frag_a(kc * 16, dp * 16), trans=True)
                    mma(dva[2 * dp], pa, b4[:, 0], b4[:, 1]); mma(dva[2 * dp + 1], pa, b4[:, 2], b4[:, 3])
            dpt = [np.zeros((32, 4)) for _ in range(BQ // 8)]
            for kk in range(D // 16):
                va = ldsm(Vs, frag_a(warp * 16, kk * 16))
                for np_ in range(BQ // 16):
                    b4 = ldsm(dOb, frag_bt(np_ * 16, kk * 16))
                    mma(dpt[2 * np_], va, b4[:, 0], b4[:, 1]); mma(dpt[2 * np_ + 1], va, b4[:, 2], b4[:, 3])
            for nt in range(BQ // 8):
                for e in range(4):
                    dpt[nt][:, e] = st[nt][:, e] * (dpt[nt][:, e] - dlt_s[nt * 8 + 2 * T4 + (e & 1)])
            for kc in range(BQ // 16):
                da = c_to_a(dpt[2 * kc], dpt[2 * kc + 1])
                for dp in range(D // 16):
                    b4 = ldsm(Qb, frag_a(kc * 16, dp * 16), trans=True)
                    mma(dka[2 * dp], da, b4[:, 0], b4[:, 1]); mma(dka[2 * dp + 1], da, b4[:, 2], b4[:, 3])
        one = np.ones(32)
        store_rows(dka, one * scale, one * scale, dk, k0 + warp * 16, Tk, D)
        store_rows(dva, one, one, dv, k0 + warp * 16, Tk, D)


def dq_block(D, q, k, v, do, lse, delta, mrow, Tq, Tk, causal, scale, q0, dq):
    sl2 = scale * LOG2E
    off = Tk - Tq
    kend = min(Tk, q0 + kBQ + off) if causal else Tk
    ntiles = (kend + kBK - 1) // kBK if kend > 0 else 0
    if ntiles == 0:
        for r in range(q0, min(q0 + kBQ, Tq)):
            dq[r] = 0
        return
    Qs = tile_load(q, q0, Tq, kBQ, D); dOs = tile_load(do, q0, Tq, kBQ, D)
    for warp in range(4):
        r_lo = q0 + warp * 16 + G
        lse2 = np.full((32, 2), np.inf); dlt = np.zeros((32, 2))
        for h in range(2):
            for lane in range(32):
                row = r_lo[lane] + 8 * h
                if row < Tq:
                    if not np.isinf(lse[row]):
                        lse2[lane, h] = lse[row] * LOG2E
                    dlt[lane, h] = delta[row]
        dqa = [np.zeros((32, 4)) for _ in range(D // 8)]
        for j in range(ntiles):
            k0 = j * kBK
            Kb = tile_load(k, k0, Tk, kBK, D); Vb = tile_load(v, k0, Tk, kBK, D)
            ok = np.array([(k0 + i < Tk) and (mrow is None or mrow[k0 + i] != 0) for i in range(kBK)])
            s = [np.zeros((32, 4)) for _ in range(kBK // 8)]
            dp = [np.zeros((32, 4)) for _ in range(kBK // 8)]
            for kk in range(D // 16):
                qa = ldsm(Qs, frag_a(warp * 16, kk * 16)); da = ldsm(dOs, frag_a(warp * 16, kk * 16))
                for np_ in range(kBK // 16):
                    kb = ldsm(Kb, frag_bt(np_ * 16, kk * 16)); vb = ldsm(Vb, frag_bt(np_ * 16, kk * 16))
                    mma(s[2 * np_], qa, kb[:, 0], kb[:, 1]); mma(s[2 * np_ + 1], qa, kb[:, 2], kb[:, 3])
                    mma(dp[2 * np_], da, vb[:, 0], vb[:, 1]); mma(dp[2 * np_ + 1], da, vb[:, 2], vb[:, 3])
            need_mask = (mrow is not None) or k0 + kBK > Tk or (causal and k0 + kBK - 1 > q0 + off)
            for nt in range(kBK // 8):
                for e in range(4):
                    h = e >> 1
                    with np.errstate(over='ignore'):
                        p = np.exp2(s[nt][:, e] * sl2 - lse2[:, h])
                    if need_mask:
                        kc = nt * 8 + 2 * T4 + (e & 1)
                        bad = ~ok[kc] | (causal & (k0 + kc > r_lo + 8 * h + off))
                        p = np.where(bad, 0.0, p)
                    s[nt][:, e] = p * (dp[nt][:, e] - dlt[:, h])
            for kc in range(kBK // 16):
                a = c_to_a(s[2 * kc], s[2 * kc + 1])
                for dt in range(D // 16):
                    kb = ldsm(Kb, frag_a(kc * 16, dt * 16), trans=True)
                    mma(dqa[2 * dt], a, kb[:, 0], kb[:, 1]); mma(dqa[2 * dt + 1], a, kb[:, 2], kb[:, 3])
        one = np.ones(32)
        store_rows(dqa, one * scale, one * scale, dq, q0 + warp * 16, Tq, D)


def reference(q, k, v, do, mrow, causal, scale):
    Tq, Tk = q.shape[0], k.shape[0]
    S = scale * q @ k.T
    allowed = np.ones((Tq, Tk), bool)
    if mrow is not None:
        allowed &= (mrow != 0)[None, :]
    if causal:
        allowed &= np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq
    S = np.where(allowed, S, -np.inf)
    mx = S.max(1, keepdims=True)
    mxs = np.where(np.isfinite(mx), mx, 0)
    E = np.where(allowed, np.exp(S - mxs), 0)
    l = E.sum(1, keepdims=True)
    P = np.where(l > 0, E / np.where(l > 0, l, 1), 0)
    lse = np.where(l[:, 0] > 0, mxs[:, 0] + np.log(np.where(l[:, 0] > 0, l[:, 0], 1)), np.inf)
    O = P @ v
    dV = P.T @ do
    dP = do @ v.T
    delta = (do * O).sum(1)
    dS = P * (dP - delta[:, None])
    dQ = scale * dS @ k
    dK = scale * dS.T @ q
    return O, lse, dQ, dK, dV


# G query heads sharing one kv head (grouped-query attention; G = 1 is multi-head): the forward
# and dQ blocks of each query head read the shared k, v; the dK/dV blocks walk the whole group.
# The reference sums each head's dK, dV.
def run(D, Tq, Tk, causal, use_mask, seed, G=1):
    rng = np.random.default_rng(seed)
    k, v = (rng.standard_normal((Tk, D)) for _ in range(2))
    qs = [rng.standard_normal((Tq, D)) for _ in range(G)]
    dos = [rng.standard_normal((Tq, D)) for _ in range(G)]
    mrow = None
    if use_mask:
        mrow = (rng.random(Tk) > 0.3).astype(np.uint8)
        if Tk > 3:
            mrow[:3] = 0  # make some causal rows fully masked
    scale = 1 / np.sqrt(D)
    refs = [reference(qs[g], k, v, dos[g], mrow, causal, scale) for g in range(G)]
    outs, lses, deltas, dqs = [], [], [], []
    for g in range(G):
        out = np.full((Tq, D), np.nan); lse = np.full(Tq, np.nan)
        for by in range((Tq + kBQ - 1) // kBQ):
            fwd_block(D, qs[g], k, v, mrow, Tq, Tk, causal, scale, by * kBQ, out, lse)
        outs.append(out); lses.append(lse); deltas.append((dos[g] * out).sum(1))
    dk = np.full((Tk, D), np.nan); dv = np.full((Tk, D), np.nan)
    for by in range((Tk + kBK - 1) // kBK):
        dkdv_block(D, qs, k, v, dos, lses, deltas, mrow, Tq, Tk, causal, scale, by * kBK, dk, dv)
    for g in range(G):
        dq = np.full((Tq, D), np.nan)
        for by in range((Tq + kBQ - 1) // kBQ):
            dq_block(D, qs[g], k, v, dos[g], lses[g], deltas[g], mrow, Tq, Tk, causal, scale, by * kBQ, dq)
        dqs.append(dq)
    pairs = [("dK", dk, sum(r[3] for r in refs)), ("dV", dv, sum(r[4] for r in refs))]
    for g in range(G):
        pairs += [(f"O{g}", outs[g], refs[g][0]), (f"lse{g}", lses[g], refs[g][1]), (f"dQ{g}", dqs[g], refs[g][2])]
    errs = {}
    for name, a, b in pairs:
        assert not np.isnan(a).any(), f"{name} has NaN"
        fin = np.isfinite(b)
        assert (np.isfinite(a) == fin).all(), f"{name} inf pattern differs"
        errs[name] = float(np.max(np.abs(a[fin] - b[fin]))) if fin.any() else 0.0
    bad = {n: e for n, e in errs.items() if e > 1e-9}
    print(f"D={D} Tq={Tq} Tk={Tk} causal={causal} mask={use_mask} G={G}: " + ("OK" if not bad else f"FAIL {bad}"),
          flush=True)
    return not bad


if __name__ == "__main__":
    cases = [(64, 64, 64, False, False), (64, 70, 70, True, False), (64, 50, 130, True, True),
             (128, 130, 50, True, True), (64, 100, 37, False, True), (128, 65, 65, False, False),
             (64, 129, 129, True, True), (64, 3, 200, True, False), (128, 33, 97, True, False)]
    gqa = [(64, 70, 70, True, True, 3), (128, 33, 97, True, False, 2), (64, 100, 37, False, True, 2)]
    ok = all([run(*c, seed=i) for i, c in enumerate(cases)] + [run(*c[:5], seed=100 + i, G=c[5]) for i, c in enumerate(gqa)])
    sys.exit(0 if ok else 1)
