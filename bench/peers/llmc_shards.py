#!/usr/bin/env python3
"""Token shards for the llm.c peer (bench/issues_44_46_call9.sh): DIR/train_000.bin and DIR/val_000.bin,
each llm.c's 256 x int32 header (magic 20240520, version 1, token count) then uint16 GPT-2 ids, drawn
uniformly (the speed run reads tokens, not meaning)."""
import os
import sys

import numpy as np

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1)
for split, count in (("train", 16_000_000), ("val", 1_000_000)):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, count
    with open(os.path.join(out, f"{split}_000.bin"), "wb") as f:
        f.write(header.tobytes())
        f.write(rng.integers(0, 50257, size=count, dtype=np.uint16).tobytes())
