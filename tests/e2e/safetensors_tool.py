"""Reads and damages safetensors files for the e2e tests, with the standard library only.

  check FILE            parse FILE the way Python's `safetensors` package does (8-byte header
                        length, JSON header, dtypes, contiguous data offsets); print "name dtype shape"
  truncate FILE N       keep the first N bytes
  bad-header FILE       replace the JSON header with garbage of the same length
  to-f64 FILE NAME      rewrite tensor NAME as F64 (a valid file with the wrong dtype)
  reshape FILE NAME     give tensor NAME the same bytes in another shape (a valid file, wrong shape)
  drop FILE NAME        remove tensor NAME (a valid file with a missing tensor)
  set FILE NAME VALUE   write VALUE (a float: nan, inf, -1, ...) into element 0 of float tensor NAME
  digest DIR            every weight tensor of the model directory DIR (model.safetensors or the
                        shards of model.safetensors.index.json): "name dtype shape sha256", sorted
  convert DIR DTYPE     rewrite every F32/BF16 weight of DIR as DTYPE (F32 or BF16; f32 -> bf16
                        rounds to nearest even), in place
  ids FILE B T V [SEED] write an inputs file for `leantrain eval`: input_ids I64 [B, T] below V
"""
import hashlib
import os
import random
import json
import struct
import sys

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError("header length beyond the file")
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    meta = header.pop("__metadata__", None)
    tensors = {}
    end = 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, t = e["data_offsets"]
        count = 1
        for d in e["shape"]:
            count *= d
        if e["dtype"] not in SIZES:
            raise ValueError(f"{name}: unknown dtype {e['dtype']}")
        if b != end or t - b != count * SIZES[e["dtype"]]:
            raise ValueError(f"{name}: offsets {b}..{t} do not match dtype/shape or leave a gap")
        end = t
        tensors[name] = {"dtype": e["dtype"], "shape": e["shape"], "data": data[b:t]}
    if end != len(data):
        raise ValueError("data section has trailing bytes")
    return tensors, meta


def write(path, tensors, meta):
    header, offset = {}, 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, t in tensors.items():
        header[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [offset, offset + len(t["data"])]}
        offset += len(t["data"])
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(t["data"] for t in tensors.values()))


def weight_files(d):
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return [os.path.join(d, "model.safetensors")]
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    return [os.path.join(d, s) for s in sorted(set(index["weight_map"].values()))]


def f32_to_bf16(data):
    out = bytearray()
    for (bits,) in struct.iter_unpack("<I", data):
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even (no NaNs here)
        out += struct.pack("<H", bits & 0xFFFF)
    return bytes(out)


def bf16_to_f32(data):
    return b"".join(struct.pack("<I", h << 16) for (h,) in struct.iter_unpack("<H", data))


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    if cmd == "digest":
        rows = []
        for p in weight_files(path):
            tensors, _ = read(p)
            for name, t in tensors.items():
                rows.append(f"{name} {t['dtype']} {t['shape']} {hashlib.sha256(t['data']).hexdigest()}")
        print("\n".join(sorted(rows)))
        return
    if cmd == "convert":
        want = sys.argv[3]
        for p in weight_files(path):
            tensors, meta = read(p)
            for t in tensors.values():
                if t["dtype"] == "F32" and want == "BF16":
                    t["data"], t["dtype"] = f32_to_bf16(t["data"]), "BF16"
                elif t["dtype"] == "BF16" and want == "F32":
                    t["data"], t["dtype"] = bf16_to_f32(t["data"]), "F32"
            write(p, tensors, meta)
        return
    if cmd == "ids":
        b, t, v = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        rng = random.Random(int(sys.argv[6]) if len(sys.argv) > 6 else 0)
        data = struct.pack(f"<{b * t}q", *[rng.randrange(v) for _ in range(b * t)])
        write(path, {"input_ids": {"dtype": "I64", "shape": [b, t], "data": data}}, None)
        return
    if cmd == "check":
        tensors, meta = read(path)
        for name, t in tensors.items():
            print(name, t["dtype"], t["shape"])
        return
    if cmd == "truncate":
        with open(path, "rb") as f:
            blob = f.read()
        with open(path, "wb") as f:
            f.write(blob[: int(sys.argv[3])])
        return
    if cmd == "bad-header":
        with open(path, "rb") as f:
            blob = bytearray(f.read())
        (n,) = struct.unpack("<Q", blob[:8])
        blob[8 : 8 + n] = (b"{not json!" * n)[:n]
        with open(path, "wb") as f:
            f.write(blob)
        return
    tensors, meta = read(path)
    name = sys.argv[3]
    t = tensors[name]
    if cmd == "to-f64":
        values = struct.unpack(f"<{len(t['data']) // 4}f", t["data"])
        t["data"], t["dtype"] = struct.pack(f"<{len(values)}d", *values), "F64"
    elif cmd == "reshape":
        count = len(t["data"]) // SIZES[t["dtype"]]
        t["shape"] = [2, count // 2] if t["shape"] != [2, count // 2] else [count]
    elif cmd == "drop":
        del tensors[name]
    elif cmd == "set":
        value = float(sys.argv[4])
        if t["dtype"] == "F32":
            first = struct.pack("<f", value)
        elif t["dtype"] == "F16":
            first = struct.pack("<e", value)
        elif t["dtype"] == "BF16":
            first = struct.pack("<f", value)[2:]  # the upper half of the f32 bits
        else:
            sys.exit(f"set: {name} is {t['dtype']}, not a float tensor")
        t["data"] = first + t["data"][len(first) :]
    else:
        sys.exit(f"unknown command {cmd}")
    write(path, tensors, meta)


if __name__ == "__main__":
    main()
