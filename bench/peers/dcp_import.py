#!/usr/bin/env python3
"""Importing a PyTorch DCP checkpoint into stagger, against its floor.

Run with the python of bench/peers/setup_venv.sh (torch 2.x from PyPI):

  $PY bench/peers/dcp_import.py [--gib 1] [--dir /tmp] [--reps 3]

Writes bench/peers/dcp.py's GPT-like state (fp32 weights and AdamW
moments) with ``dcp.save`` once, then, in turn, --reps times, the page
cache dropped before each:

  floor    ``dcp.load`` into preallocated tensors, then a stagger
           ``save_state_dict`` of them to durable (what an import must
           at least do: read the checkpoint, then store it);
  import   ``stagger.torch.import_dcp`` to durable (DCP's reader
           allocating as it goes, then the same save).

Each save goes to a new job of one stagger-server (default options), so
none is incremental. Prints the times and

  RESULT dcp_import import_s=... floor_s=... import_x_floor=... ratio=...

(medians; the issue's target: import_x_floor <= 1.2). Exits 2 without
torch 2.x.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "build", "python"))

import dcp as peers  # noqa: E402 (bench/peers/dcp.py: the state, helpers)

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import stagger.torch as st  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--dir", default="/tmp")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--server-bin",
                   default=os.path.join(ROOT, "build", "bin",
                                        "stagger-server"))
    a = p.parse_args()
    sd = peers.gpt_state(int(a.gib * (1 << 30)))
    work = tempfile.mkdtemp(prefix="stagger-dcp-import-", dir=a.dir)
    server = None
    try:
        src = os.path.join(work, "dcp")
        dcp.save(sd, checkpoint_id=src, no_dist=True)
        server = peers.Server(a.server_bin, os.path.join(work, "data"))
        floor, imported = [], []
        for r in range(a.reps):
            dest = peers.empty_like_tree(sd)
            peers.drop_caches()
            t = time.perf_counter()
            dcp.load(dest, checkpoint_id=src, no_dist=True)
            ck = st.checkpointer(server.grpc, job=f"floor-{r}")
            st.save_state_dict(ck, dest, 1).wait()
            floor.append(time.perf_counter() - t)
            del ck, dest
            peers.drop_caches()
            t = time.perf_counter()
            ck = st.checkpointer(server.grpc, job=f"import-{r}")
            st.import_dcp(ck, src, 1).wait()
            imported.append(time.perf_counter() - t)
            del ck
            print(f"turn {r}: floor {floor[-1]:.3f} s, import "
                  f"{imported[-1]:.3f} s", flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    f, i = statistics.median(floor), statistics.median(imported)
    print(f"torch {torch.__version__}, {len(peers.tensors(sd))} tensors, "
          f"{a.gib} GiB")
    print(f"RESULT dcp_import import_s={i:.4g} floor_s={f:.4g} "
          f"import_x_floor={i / f:.4g} ratio={i / f:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
