#!/usr/bin/env python3
"""Peer of bench_gpu: how long torch.distributed.checkpoint.async_save blocks.

For each size, a state dict of CUDA bf16 tensors (512 MiB each, weights-like
values) is saved with dcp.async_save; the time until async_save returns is
the blocking time (it stages the state to host memory before returning), the
time until its future completes is the total. With --stagger-json (the
bench_gpu --json report) it also prints torch's blocking time over stagger's
stall for the same size ("direct" mode): the target is >= 3.

Exit codes: 0 measured, 1 a save failed, 3 skipped (no torch, no CUDA device
or no async_save in this torch). The last line is always a RESULT line.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

GIB = 1 << 30
MIB = 1 << 20


def result_line(size_gib, block_s, total_s, ratio):
    return (f"RESULT torch_async_save size_gib={size_gib:g} block_s={block_s:.6g} "
            f"total_s={total_s:.6g} ratio={ratio:.6g}")


def skip(reason):
    print(f"SKIP torch_async_save: {reason}")
    print(result_line(0, math.nan, math.nan, math.nan))
    return 3


def stagger_stalls(path):
    """size_gib -> stall_s of bench_gpu's direct-mode saves that committed."""
    if not path or not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"note: cannot read {path}: {e}")
        return {}
    out = {}
    for row in doc.get("rows", []):
        if row.get("mode") == "direct" and row.get("ok") and row.get("stall_s"):
            out[float(row["size_gib"])] = float(row["stall_s"])
    return out


def make_state(torch, nbytes, tensor_bytes):
    state = {}
    off = 0
    i = 0
    while off < nbytes:
        n = min(tensor_bytes, nbytes - off) // 2
        t = torch.empty(n, dtype=torch.bfloat16, device="cuda")
        t.normal_(0.0, 0.02)
        state[f"layer.{i:04d}.weight"] = t
        off += tensor_bytes
        i += 1
    torch.cuda.synchronize()
    return state


def wait(ret):
    # A Future up to torch 2.6; newer versions may return a response object
    # holding the upload future.
    if hasattr(ret, "result"):
        return ret.result()
    if hasattr(ret, "upload_completion"):
        return ret.upload_completion.result()
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-gib", default="1,4,16")
    ap.add_argument("--dir", default=None, help="parent of the checkpoints")
    ap.add_argument("--json", default="")
    ap.add_argument("--stagger-json", default="")
    ap.add_argument("--tensor-mib", type=int, default=512)
    args = ap.parse_args()
    sizes = sorted(float(s) for s in args.sizes_gib.split(",") if s)

    try:
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
    except Exception as e:  # ImportError, or a broken install
        return skip(f"torch is not importable ({e})")
    if not torch.cuda.is_available():
        return skip(f"torch {torch.__version__} sees no CUDA device")
    if not hasattr(dcp, "async_save"):
        return skip(f"torch {torch.__version__} has no dcp.async_save")
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(0)}", flush=True)

    # A one-rank gloo group: async_save wants a CPU-capable group when one
    # exists, and some versions want one to exist.
    if dist.is_available() and not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0,
                                world_size=1)

    parent = args.dir or tempfile.gettempdir()
    os.makedirs(parent, exist_ok=True)
    base = tempfile.mkdtemp(prefix="torch-async-save-", dir=parent)
    stalls = stagger_stalls(args.stagger_json)
    rows = []
    rc = 0
    try:
        # Warm-up: thread pool, planner and file system set-up.
        warm = make_state(torch, 256 * MIB, args.tensor_mib * MIB)
        wait(dcp.async_save(warm, checkpoint_id=os.path.join(base, "warm")))
        del warm
        shutil.rmtree(os.path.join(base, "warm"), ignore_errors=True)

        for gib in sizes:
            nbytes = int(gib * GIB) & ~1
            path = os.path.join(base, f"size-{gib:g}")
            try:
                state = make_state(torch, nbytes, args.tensor_mib * MIB)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                ret = dcp.async_save(state, checkpoint_id=path)
                block = time.perf_counter() - t0
                wait(ret)
                total = time.perf_counter() - t0
            except Exception as e:  # report and go on with the next size
                print(f"size {gib:g} GiB: async_save failed: {e!r}", flush=True)
                rc = 1
                continue
            finally:
                state = None
                torch.cuda.empty_cache()
                shutil.rmtree(path, ignore_errors=True)
            ratio = block / stalls[gib] if gib in stalls else math.nan
            rows.append({"size_gib": gib, "bytes": nbytes, "block_s": block,
                         "total_s": total,
                         "stagger_stall_s": stalls.get(gib),
                         "block_over_stagger_stall": None if math.isnan(ratio) else ratio})
            print(f"size {gib:g} GiB: async_save blocked {block:.4f} s "
                  f"({nbytes / block / 1e9:.2f} GB/s), done after {total:.4f} s; "
                  f"stagger stall {stalls.get(gib, math.nan):.4f} s, "
                  f"torch/stagger {ratio:.2f}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "torch_async_save", "torch": torch.__version__,
                       "rows": rows}, f, indent=1)
    if not rows:
        print(result_line(0, math.nan, math.nan, math.nan))
        return 1
    last = rows[-1]
    ratio = last["block_over_stagger_stall"]
    print(result_line(last["size_gib"], last["block_s"], last["total_s"],
                      math.nan if ratio is None else ratio))
    return rc


if __name__ == "__main__":
    sys.exit(main())
