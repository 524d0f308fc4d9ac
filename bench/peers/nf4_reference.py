#!/usr/bin/env python3
"""NF4 with double quantisation, re-implemented in torch from bitsandbytes' published algorithm
(bitsandbytes cannot be installed on the GPU machine), to check leantrain bit for bit.

What bitsandbytes' quantize_4bit(A, quant_type="nf4", blocksize=64, compress_statistics=True) does
(functional.py, csrc/kernels.cu kQuantizeBlockwise / dQuantizeNF4 / dQuantize), written here in
plain torch ops, in f32, on the CPU:
  1. A is flattened and padded with zeros to whole blocks of 64; absmax = max |x| per block (f32).
  2. Each value is multiplied by 1 / absmax (f32 reciprocal; inf for an all-zero block, so its
     values become NaN) and mapped to a 4-bit code by the decision tree of dQuantizeNF4 (15 f32
     thresholds, strictly greater goes up; NaN fails every test and lands on code 0).
  3. Codes are packed two per byte, the first element in the high nibble; an odd length keeps the
     pad element's code in the last low nibble.
  4. Double quantisation: offset = mean(absmax); absmax - offset is quantised with
     quantize_blockwise (blocks of 256, the signed dynamic map of create_dynamic_map(signed=True),
     dQuantize's binary search and tie rules), giving u8 codes and f32 nested_absmax.
Dequantisation: absmax' = map[code] * nested_absmax + offset (two f32 ops), out = NF4[code] * absmax'.

One deliberate difference: bitsandbytes takes torch's f32 mean of absmax on the GPU (summation
order device-dependent); this reference and leantrain take the mean in f64 rounded once to f32.
Pass --f32-mean to use torch's f32 mean instead and see whether any code changes.

Writes OUT.safetensors with, for each case NAME:
  NAME.input                         the tensor quantised (its own dtype)
  NAME.weight                        u8 [(n + 1) / 2, 1] packed codes (bitsandbytes' shape)
  NAME.weight.absmax                 u8 [blocks] nested codes of the absmax
  NAME.weight.nested_absmax          f32 [nested blocks]
  NAME.weight.nested_quant_map       f32 [256]
  NAME.weight.quant_map              f32 [16]
  NAME.weight.offset                 f32 [1]
  NAME.dequant                       the dequantised tensor, in the input's dtype
  NAME.weight.quant_state.bitsandbytes__nf4   u8: the JSON bitsandbytes packs (2-d cases are
                                     also read back through leantrain's bitsandbytes loader)
and `bnb_dynamic_map` (f32 [256]). Then run
  LT_NF4_REFERENCE=OUT.safetensors build-cuda/leantrain_tests --gtest_filter='QuantNf4Reference*'
which quantises every NAME.input with leantrain (CPU, and CUDA when present) and compares every
byte. Also prints the dynamic map as hex floats (to hard-code it in leantrain if its f32
emulation of torch's linspace ever differs).

Usage: python3 bench/peers/nf4_reference.py --out /tmp/nf4_ref.safetensors [--f32-mean]
"""
import argparse
import json
import struct
import sys

import torch

NF4 = torch.tensor([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=torch.float32)


def f32(v):
    return torch.tensor(v, dtype=torch.float32)


# dQuantizeNF4's 15 thresholds as the f32 values nvcc (and gcc) give its float literals, which it
# rounds from decimal to f32 directly. Written in hex because going through a Python float (decimal
# -> f64 -> f32, two roundings) lands one ulp off for four of them (thresholds 0, 8, 12, 14):
# e.g. -0.8480964004993439f is -0x1.b239b2p-1, but float32(float("-0.8480964004993439")) is
# -0x1.b239b0p-1. (Checked with nvcc -ptx: the constants are 0fBF591CD9, 0f3DF64863, ...)
THRESHOLDS = [float.fromhex(h) for h in (
    "-0x1.b239b2p-1", "-0x1.38a4ep-1", "-0x1.d709p-2", "-0x1.5bd4ecp-2", "-0x1.e079d8p-3",
    "-0x1.1a7178p-3", "-0x1.74f0e2p-5", "0x1.45f5fep-5", "0x1.ec90c6p-4", "0x1.a0cfcp-3",
    "0x1.2b05a8p-2", "0x1.8ea7f2p-2", "0x1.00da06p-1", "0x1.491b5ep-1", "0x1.b913b2p-1")]


def nf4_tree(x):
    """dQuantizeNF4's decision tree, node by node (torch.where per branch); THRESHOLDS[k]
    separates code k from code k + 1."""
    def leaf(c):
        return torch.full_like(x, c, dtype=torch.int64)

    def node(k, hi, lo):
        return torch.where(x > f32(THRESHOLDS[k]), hi, lo)

    c111 = node(14, leaf(15), leaf(14))
    c110 = node(12, leaf(13), leaf(12))
    c11 = node(13, c111, c110)
    c101 = node(10, leaf(11), leaf(10))
    c100 = node(8, leaf(9), leaf(8))
    c10 = node(9, c101, c100)
    c1 = node(11, c11, c10)
    c011 = node(6, leaf(7), leaf(6))
    c010 = node(4, leaf(5), leaf(4))
    c01 = node(5, c011, c010)
    c001 = node(2, leaf(3), leaf(2))
    c000 = node(0, leaf(1), leaf(0))
    c00 = node(1, c001, c000)
    c0 = node(3, c01, c00)
    return node(7, c1, c0)


def create_dynamic_map_signed():
    """create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), the same torch ops."""
    data = []
    for i in range(7):
        fraction_items = 2 ** i + 1
        boundaries = torch.linspace(0.1, 1, fraction_items, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        data += (-(10 ** (-6 + i)) * means).tolist()
    data.append(0)
    data.append(1.0)
    assert len(data) == 256
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


def bnb_code_search(code, x):
    """dQuantize<0>: binary search from entry 127 in 7 halving steps, then the nearer neighbour
    by f32 midpoints; exactly at a midpoint keeps the final pivot."""
    pivot = torch.full_like(x, 127, dtype=torch.int64)
    upper_pivot = torch.full_like(pivot, 255)
    lower_pivot = torch.zeros_like(pivot)
    lower = torch.full_like(x, -1.0)
    upper = torch.full_like(x, 1.0)
    val = code[pivot]
    step = 64
    while step > 0:
        gt = x > val
        lower_pivot = torch.where(gt, pivot, lower_pivot)
        lower = torch.where(gt, val, lower)
        upper_pivot = torch.where(gt, upper_pivot, pivot)
        upper = torch.where(gt, upper, val)
        pivot = torch.where(gt, pivot + step, pivot - step)
        val = code[pivot]
        step //= 2
    upper = torch.where(upper_pivot == 255, code[255], upper)
    lower = torch.where(lower_pivot == 0, code[0], lower)
    gt = x > val
    up_mid = (upper + val) * 0.5
    lo_mid = (lower + val) * 0.5
    return torch.where(gt, torch.where(x > up_mid, upper_pivot, pivot),
                       torch.where(x < lo_mid, lower_pivot, pivot)).to(torch.uint8)


def blocks_of(flat, size):
    n = flat.numel()
    nb = (n + size - 1) // size
    padded = torch.zeros(nb * size, dtype=torch.float32)
    padded[:n] = flat
    return padded.view(nb, size)


def quantize_blockwise(x, code):
    """quantize_blockwise(x, blocksize=256) with `code`: u8 codes, f32 absmax per block."""
    n = x.numel()
    b = blocks_of(x, 256)
    absmax = b.abs().amax(dim=1)
    recip = 1.0 / absmax
    codes = bnb_code_search(code, (b * recip[:, None]).reshape(-1))[:n]
    return codes, absmax


def quantize_nf4(a, f32_mean):
    flat = a.reshape(-1).to(torch.float32)
    n = flat.numel()
    b = blocks_of(flat, 64)
    absmax = b.abs().amax(dim=1)
    recip = 1.0 / absmax
    codes = nf4_tree(b * recip[:, None]).reshape(-1)[: n + n % 2]
    packed = ((codes[0::2] << 4) | codes[1::2]).to(torch.uint8)
    offset = absmax.mean() if f32_mean else absmax.double().mean().float()
    dmap = create_dynamic_map_signed()
    acodes, nested = quantize_blockwise(absmax - offset, dmap)
    return packed, acodes, nested, dmap, offset.reshape(1)


def dequantize_nf4(packed, acodes, nested, dmap, offset, n, dtype):
    idx = torch.arange(acodes.numel())
    absmax = dmap[acodes.long()] * nested[idx // 256]
    absmax = absmax + offset
    codes = torch.stack([packed >> 4, packed & 15], dim=1).reshape(-1)[:n].long()
    out = NF4[codes] * absmax[torch.arange(n) // 64]
    return out.to(dtype)


def cases():
    g = torch.Generator().manual_seed(0)
    out = {}
    for n in (1, 2, 63, 64, 65, 127, 1001, 4096 * 3 + 17, 64 * 256 * 5 + 3):
        out[f"normal_{n}"] = torch.randn(n, generator=g) * 0.02
    out["normal_bf16"] = (torch.randn(64 * 300 + 7, generator=g) * 0.05).to(torch.bfloat16)
    out["normal_f16"] = (torch.randn(64 * 300 + 9, generator=g) * 0.05).to(torch.float16)
    out["matrix_256x384"] = torch.randn(256, 384, generator=g) * 0.03
    out["matrix_bf16_96x200"] = (torch.randn(96, 200, generator=g) * 0.03).to(torch.bfloat16)
    out["zeros_200"] = torch.zeros(200)
    z = torch.randn(64 * 10 + 5, generator=g)
    z[64:192] = 0
    z[640:] = 0  # an all-zero partial block at an odd length
    out["zero_blocks"] = z
    codes = torch.arange(16 * 40) % 16
    out["code_values"] = NF4[codes] * 3.0
    t = torch.tensor(THRESHOLDS, dtype=torch.float32)
    out["thresholds"] = torch.cat([t, torch.nextafter(t, torch.full_like(t, 2)),
                                   torch.nextafter(t, torch.full_like(t, -2)), torch.ones(1)])
    out["wide_range"] = torch.randn(64 * 512, generator=g) * torch.logspace(-6, 2, 64 * 512)
    return out


def save_safetensors(path, tensors):
    """A minimal safetensors writer (header JSON + raw little-endian bytes)."""
    names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.uint8: "U8"}
    header, blobs, off = {}, [], 0
    for k, v in tensors.items():
        v = v.contiguous()
        raw = v.view(torch.uint8).numpy().tobytes() if v.numel() else b""
        header[k] = {"dtype": names[v.dtype], "shape": list(v.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--f32-mean", action="store_true")
    args = ap.parse_args()
    tensors = {}
    for name, a in cases().items():
        packed, acodes, nested, dmap, offset = quantize_nf4(a, args.f32_mean)
        n = a.numel()
        tensors[f"{name}.input"] = a
        tensors[f"{name}.weight"] = packed.reshape(-1, 1)
        tensors[f"{name}.weight.absmax"] = acodes
        tensors[f"{name}.weight.nested_absmax"] = nested
        tensors[f"{name}.weight.nested_quant_map"] = dmap
        tensors[f"{name}.weight.quant_map"] = NF4.clone()
        tensors[f"{name}.weight.offset"] = offset
        tensors[f"{name}.dequant"] = dequantize_nf4(packed, acodes, nested, dmap, offset, n, a.dtype).reshape(a.shape)
        # QuantState.as_dict(packed=True)'s JSON: json.dumps of the non-tensor fields, as bytes
        state = {"quant_type": "nf4", "blocksize": 64, "dtype": str(a.dtype).strip("torch."),
                 "shape": tuple(a.shape), "nested_blocksize": 256, "nested_dtype": "float32",
                 "nested_offset": offset.item()}
        tensors[f"{name}.weight.quant_state.bitsandbytes__nf4"] = torch.tensor(
            list(json.dumps(state).encode("utf-8")), dtype=torch.uint8)
    tensors["bnb_dynamic_map"] = create_dynamic_map_signed()
    save_safetensors(args.out, tensors)
    print("bnb dynamic map (hex):", " ".join(float(v).hex() for v in tensors["bnb_dynamic_map"]))
    print(f"wrote {len(tensors)} tensors to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
