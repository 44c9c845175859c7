#!/usr/bin/env python3
"""Figures of bench/fabric from the trainers' JSON lines.

  report.py deadline DIR EVERY
      J iterations' worth of baseline time (J x the baseline's median job
      iteration) x 0.8, in seconds: the qos mode's deadline.
  report.py summary DIR [--json OUT]
      the table and, last, the RESULT line.
  report.py runs RUN.json... [--json OUT]
      several runs' summaries (--json of summary): each figure's median
      and worst run, and whether qos stayed at or below naive at p99 in
      every run; last, the RESULT fabric_runs line.

DIR holds config.json (written by run.sh), <mode>.r<rank>.jsonl per mode
and trainer, <mode>.meta.json (bytes s0 received during the mode) and
<mode>.skipped (why a mode did not run).
"""
import glob
import json
import math
import os
import sys

import numpy as np

MODES = ("baseline", "naive", "qos")
MiB = 1 << 20


def load_mode(d, mode):
    iters, ckpts, ends = {}, [], []
    files = sorted(glob.glob(os.path.join(d, f"{mode}.r*.jsonl")))
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if rec["type"] == "iter":
                    iters.setdefault(rec["iter"], []).append(rec)
                elif rec["type"] == "ckpt":
                    ckpts.append(rec)
                elif rec["type"] == "end":
                    ends.append(rec)
    return files, iters, ckpts, ends


def job_allreduce_times(iters, nodes, warmup):
    """Per iteration, the slowest rank's all-reduce (the collective, and
    in a real job the backward pass it overlaps)."""
    return np.array([max(r["allreduce_s"] for r in recs)
                     for it, recs in sorted(iters.items())
                     if it >= warmup and len(recs) == nodes])


def job_iteration_times(iters, nodes, warmup):
    """Per iteration, the slowest rank's time: what a synchronous job
    sees. Warm-up iterations and incomplete ones are left out."""
    return np.array([max(r["t_s"] for r in recs)
                     for it, recs in sorted(iters.items())
                     if it >= warmup and len(recs) == nodes])


def ar_tx_mib(iters, warmup):
    """Mean and most MiB a node sent on eth0 while an all-reduce ran (None,
    None when the records predate the figure)."""
    tx = [r["allreduce_tx_bytes"] for it, recs in iters.items()
          if it >= warmup for r in recs if "allreduce_tx_bytes" in r]
    if not tx:
        return None, None
    return float(np.mean(tx)) / MiB, float(np.max(tx)) / MiB


def read_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def link_rate_Bps(d, cfg):
    """The probe's measured goodput, else the configured cap."""
    probe = read_json(os.path.join(d, "probe.json"), {})
    return probe.get("goodput_Bps") or cfg["rate_mbit"] * 1e6 / 8


def idle_fraction(cfg, p50_s):
    """The share of an iteration the link is idle: compute / iteration."""
    return cfg["compute_ms"] / 1e3 / p50_s


def idle_bound_s(mib, link_Bps, idle):
    """The idle-bandwidth bound: `mib` MiB over the link's idle share."""
    return mib * MiB / (link_Bps * idle)


def deadline(d, every):
    cfg = read_json(os.path.join(d, "config.json"))
    _, iters, _, _ = load_mode(d, "baseline")
    t = job_iteration_times(iters, cfg["nodes"], cfg["warmup"])
    if len(t) == 0:
        sys.exit("report.py: no baseline iterations to size the deadline")
    # 0.8 of the interval: a save must be durable before the next one
    # starts, with room for the snapshot and the commit.
    p50 = float(np.median(t))
    dl = 0.8 * every * p50
    bound = idle_bound_s(cfg["ckpt_mib"], link_rate_Bps(d, cfg),
                         idle_fraction(cfg, p50))
    # The qos sender ends near its deadline, so the deadline decides where
    # durable time lands against the bound.
    if not bound <= dl <= 1.3 * bound:
        print(f"report.py: the deadline {dl:.2f} s is {dl / bound:.2f}x the "
              f"idle-bandwidth bound {bound:.2f} s, outside 1-1.3x: "
              + ("no schedule can meet it, saves will be late"
                 if dl < bound else "qos saves will take longer than 1.3x")
              + "; re-size --every (README: Parameters)", file=sys.stderr)
    print(f"{dl:.4f}")


def fmt(v, spec):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def summary(d, json_out):
    cfg = read_json(os.path.join(d, "config.json"))
    nodes, warmup = cfg["nodes"], cfg["warmup"]
    link_Bps = link_rate_Bps(d, cfg)
    rows, figures = {}, {}
    for mode in MODES:
        skipped = os.path.join(d, f"{mode}.skipped")
        if os.path.exists(skipped):
            with open(skipped, encoding="utf-8") as f:
                rows[mode] = {"skipped": f.read().strip()}
            continue
        files, iters, ckpts, ends = load_mode(d, mode)
        if not files:
            continue
        t = job_iteration_times(iters, nodes, warmup)
        ar_mean, ar_max = ar_tx_mib(iters, warmup)
        meta = read_json(os.path.join(d, f"{mode}.meta.json"), {})
        ar = job_allreduce_times(iters, nodes, warmup)
        calls = [r.get("save_call_s", 0) for it, recs in iters.items()
                 if it >= warmup for r in recs]
        row = {"n": len(t), "p50": float(np.percentile(t, 50)),
               "p99": float(np.percentile(t, 99)),
               "ar_p99": float(np.percentile(ar, 99)),
               "save_call_max_ms": 1e3 * max(calls, default=0),
               "s0_rx_MiB": meta.get("s0_rx_bytes", 0) / MiB,
               "ar_tx_MiB": ar_mean, "ar_tx_max_MiB": ar_max,
               "retrans": sum(r.get("ring_retrans", 0)
                              for it, recs in iters.items() if it >= warmup
                              for r in recs),
               "deadline_s": meta.get("deadline_s")}
        if any("gate_models_dropped" in e for e in ends):
            row["gate_drops"] = sum(e.get("gate_models_dropped", 0)
                                    for e in ends)
        if ckpts:
            row["ckpts"] = len(ckpts)
            row["MiB"] = np.mean([c["bytes_shipped"] for c in ckpts]) / MiB
            row["durable_s"] = float(np.mean([c["durable_s"] for c in ckpts]))
            row["durable_max_s"] = max(c["durable_s"] for c in ckpts)
            row["stall_ms"] = 1e3 * float(np.mean([c["stall_s"]
                                                   for c in ckpts]))
            ys = [c["yield_s"] for c in ckpts if "yield_s" in c]
            if ys:
                row["yield_s"] = float(np.mean(ys))
        rows[mode] = row

    base = rows.get("baseline", {})
    idle = None
    if "p50" in base:
        idle = idle_fraction(cfg, base["p50"])
        figures["idle_frac"] = idle
        figures["base_p50_ms"] = 1e3 * base["p50"]
        figures["base_p99_ms"] = 1e3 * base["p99"]
    for mode, row in rows.items():
        if "p50" not in row or "p50" not in base:
            continue
        row["p50_x"] = row["p50"] / base["p50"]
        if row.get("ar_tx_MiB") is not None and base.get("ar_tx_MiB"):
            row["ar_extra_MiB"] = row["ar_tx_MiB"] - base["ar_tx_MiB"]
            # The worst single all-reduce: a few collisions hide in the
            # mean, and they are what p99 sees.
            row["ar_extra_max_MiB"] = row["ar_tx_max_MiB"] - base["ar_tx_MiB"]
            if mode != "baseline":
                figures[f"{mode}_ar_extra_MiB"] = row["ar_extra_MiB"]
                figures[f"{mode}_ar_extra_max_MiB"] = row["ar_extra_max_MiB"]
        row["p99_x"] = row["p99"] / base["p99"]
        row["ar_p99_x"] = row["ar_p99"] / base["ar_p99"]
        if "ckpts" in row and idle:
            row["bound_s"] = idle_bound_s(row["MiB"], link_Bps, idle)
            row["x_bound"] = row["durable_s"] / row["bound_s"]
        if mode != "baseline":
            figures[f"{mode}_p50_x"] = row["p50_x"]
            figures[f"{mode}_p99_x"] = row["p99_x"]
            figures[f"{mode}_ar_p99_x"] = row["ar_p99_x"]
            figures[f"{mode}_save_call_max_ms"] = row["save_call_max_ms"]
            if "x_bound" in row:
                figures[f"{mode}_ckpt_x_bound"] = row["x_bound"]
    figures["link_Mbps"] = link_Bps * 8 / 1e6
    figures["nodes"] = nodes
    figures["defaults"] = cfg.get("defaults", 0)
    figures["cpu_load"] = cfg.get("cpu_load", 0)
    ratio = figures.get("qos_p50_x", float("nan"))

    print(f"fabric: {nodes} trainer nodes + s0, caps {cfg['rate_mbit']} "
          f"Mbit/s (s0 {cfg['storage_rate_mbit']}), queue "
          f"{cfg['queue_ms']} ms; n0->s0 TCP goodput "
          f"{link_Bps * 8 / 1e6:.0f} Mbit/s; all-reduce "
          f"{cfg['allreduce_mib']} MiB + compute {cfg['compute_ms']} ms; "
          f"{cfg['iters']} iterations ({warmup} warm-up); "
          f"{cfg['save_mode']} checkpoint {cfg['ckpt_mib']} MiB/node every "
          f"{cfg['every']}; "
          f"{'default options' if cfg.get('defaults') else 'raw codec'}, "
          f"{cfg.get('update', 'sparse')} updates"
          f"{', other CPU work on every trainer node' if cfg.get('cpu_load') else ''}"
          f"{', server at SCHED_IDLE (diagnostic)' if cfg.get('server_idle') else ''}")
    if idle:
        print(f"idle fraction (compute / baseline p50) {idle:.3f}")
    head = ("mode", "iters", "p50_ms", "p99_ms", "p50_x", "p99_x", "ckpts",
            "MiB/ckpt", "deadline_s", "durable_s", "max_s", "bound_s",
            "x_bound", "stall_ms", "yield_s", "s0_rx_MiB", "ar_extra_MiB",
            "ar_max_MiB", "retrans", "gate_drops", "ar_p99_x", "call_max_ms")
    print(("{:<9}" + " {:>10}" * (len(head) - 1)).format(*head))
    for mode in MODES:
        row = rows.get(mode)
        if row is None:
            continue
        if "skipped" in row:
            print(f"{mode:<9} skipped: {row['skipped']}")
            continue
        vals = (row["n"], fmt(1e3 * row["p50"], ".1f"),
                fmt(1e3 * row["p99"], ".1f"), fmt(row.get("p50_x"), ".3f"),
                fmt(row.get("p99_x"), ".3f"), row.get("ckpts", "-"),
                fmt(row.get("MiB"), ".1f"), fmt(row.get("deadline_s"), ".2f"),
                fmt(row.get("durable_s"), ".2f"),
                fmt(row.get("durable_max_s"), ".2f"),
                fmt(row.get("bound_s"), ".2f"), fmt(row.get("x_bound"), ".2f"),
                fmt(row.get("stall_ms"), ".1f"),
                fmt(row.get("yield_s"), ".2f"),
                fmt(row.get("s0_rx_MiB"), ".0f"),
                fmt(row.get("ar_extra_MiB"), ".2f"),
                fmt(row.get("ar_extra_max_MiB"), ".2f"), row.get("retrans", "-"),
                row.get("gate_drops", "-"), fmt(row.get("ar_p99_x"), ".3f"),
                fmt(row.get("save_call_max_ms"), ".1f"))
        print(("{:<9}" + " {:>10}" * len(vals)).format(mode, *vals))
    if json_out:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump({"config": cfg, "link_Bps": link_Bps, "rows": rows,
                       "figures": figures, "ratio": ratio}, f, indent=1)
    line = "RESULT fabric" + "".join(
        f" {k}={v:.6g}" for k, v in figures.items())
    print(f"{line} ratio={ratio:.6g}")


def runs(paths, json_out):
    """Medians and the worst of several runs' figures."""
    figs = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            figs.append(json.load(f)["figures"])
    keys = ("p50_x", "p99_x", "ar_p99_x", "ckpt_x_bound", "save_call_max_ms")
    out = {"runs": len(figs)}
    print(f"\n{len(figs)} runs: median and worst (highest) of each figure")
    print(f"{'figure':<24} {'median':>9} {'worst':>9}   per run")
    for mode in ("naive", "qos"):
        for k in keys:
            vals = [f[f"{mode}_{k}"] for f in figs if f"{mode}_{k}" in f]
            if not vals:
                continue
            name = f"{mode}_{k}"
            out[f"{name}_med"] = float(np.median(vals))
            out[f"{name}_worst"] = float(max(vals))
            print(f"{name:<24} {np.median(vals):>9.3f} {max(vals):>9.3f}   "
                  + " ".join(f"{v:.3f}" for v in vals))
    pairs = [(f["qos_p99_x"], f["naive_p99_x"]) for f in figs
             if "qos_p99_x" in f and "naive_p99_x" in f]
    if pairs:
        out["qos_p99_le_naive_runs"] = sum(q <= n for q, n in pairs)
        print(f"qos p99 <= naive p99 in {out['qos_p99_le_naive_runs']} of "
              f"{len(pairs)} runs")
    for k in ("defaults", "cpu_load"):
        if figs and k in figs[0]:
            out[k] = figs[0][k]
    ratio = out.get("qos_p50_x_med", float("nan"))
    if json_out:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump({"runs": figs, "figures": out, "ratio": ratio}, f,
                      indent=1)
    line = "RESULT fabric_runs" + "".join(
        f" {k}={v:.6g}" for k, v in out.items())
    print(f"{line} ratio={ratio:.6g}")


def main():
    a = sys.argv[1:]
    if len(a) >= 2 and a[0] == "runs":
        rest = a[1:]
        json_out = None
        if "--json" in rest:
            i = rest.index("--json")
            if i + 1 >= len(rest):
                sys.exit("report.py runs: --json needs a file")
            json_out = rest[i + 1]
            rest = rest[:i] + rest[i + 2:]
        runs(rest, json_out)
        return
    if len(a) == 3 and a[0] == "deadline":
        deadline(a[1], int(a[2]))
    elif len(a) in (2, 4) and a[0] == "summary":
        summary(a[1], a[3] if len(a) == 4 and a[2] == "--json" else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
