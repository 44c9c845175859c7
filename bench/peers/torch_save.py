#!/usr/bin/python3
"""Peer for bench_stall: how long torch.save blocks for the same state.

Reads a manifest of tensors (one per line: NAME DTYPE DIM...), builds torch
tensors of those shapes and dtypes (normal values; torch.save does not
compress, so values do not change its time), and times torch.save of the
dict to a file in --dir. Prints, last:

  RESULT_PEER torch_save_s=<median> torch_save_fsync_s=<median>

torch_save_s is what a training loop calling torch.save waits for;
torch_save_fsync_s adds the fsync that makes the file durable.
"""
import argparse
import os
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("torch not installed: peer skipped")
    sys.exit(2)

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
          "F64": torch.float64}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--manifest", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--iterations", type=int, default=3)
    a = p.parse_args()

    state = {}
    with open(a.manifest) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            name, dtype, shape = parts[0], parts[1], [int(d) for d in parts[2:]]
            state[name] = torch.randn(*shape).to(DTYPES[dtype]) * 0.02

    path = os.path.join(a.dir, "torch_peer.pt")
    save_s, fsync_s = [], []
    for _ in range(a.iterations):
        start = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            saved = time.perf_counter()
            f.flush()
            os.fsync(f.fileno())
        save_s.append(saved - start)
        fsync_s.append(time.perf_counter() - start)
        os.unlink(path)
    print("RESULT_PEER torch_save_s=%.6f torch_save_fsync_s=%.6f" %
          (statistics.median(save_s), statistics.median(fsync_s)))


if __name__ == "__main__":
    main()
