#!/usr/bin/env python3
"""The durable tier on S3 against its ceiling: the same endpoint's PUT and
GET throughput measured by curl in the same run (docs/benchmarks.md, bench/s3).

    bench/s3/run.py [--mib 1024] [--reps 3] [--smoke]

Starts a one-node Ceph cluster and its radosgw (scripts/ceph-cluster.sh
start, rgw) in a temporary directory, makes a bucket, then:

  ceilings   curl (one process, --parallel, 16 transfers at once, the
             drain's width) PUTs MIB/4 objects of 4 MiB of random bytes
             to the bucket, then GETs them back, the page cache dropped
             in between: bytes / wall time each way (median of --reps);
  drain, durable, restore
             as bench/rados measures them (bench/cold_tier_bench.py), with
             a stagger-server on --s3-bucket; restores a median of --reps,
             a new server on an empty --data each.

Prints the figures and

  RESULT s3 drain_MBps=... write_MBps=... drain_x_write=...
         durable_busy_s=... durable_idle_s=... durable_x_idle=...
         restore_MBps=... read_MBps=... restore_x_read=... ratio=...

(ratio = drain_x_write). Targets: drain_x_write >= 0.8, durable_x_idle <=
1.2, restore_x_read >= 0.8. Exits 2 when the cluster or radosgw cannot
start.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
from cold_tier_bench import ROOT, drop_caches, measure, result  # noqa: E402

BUCKET = "bench"
OBJECT = 4 << 20
PARALLEL = 16


def cluster(cmd, d, *extra):
    return subprocess.run(
        [os.path.join(ROOT, "scripts", "ceph-cluster.sh"), cmd, d, *extra],
        capture_output=True, text=True,
        # stopped by the script's watcher if this process dies
        env=dict(os.environ, CEPH_CLUSTER_OWNER_PID=str(os.getpid())))


def curl_config(env, lines):
    """curl's config for a signed request per line of `lines`."""
    out = [f'aws-sigv4 = "aws:amz:us-east-1:s3"',
           f'user = "{env["AWS_ACCESS_KEY_ID"]}:{env["AWS_SECRET_ACCESS_KEY"]}"',
           'header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"',
           'expect100-timeout = 0', 'fail', 'silent', 'show-error']
    return "\n".join(out + lines) + "\n"


def curl(tmp, env, lines, parallel=True):
    conf = os.path.join(tmp, "curl.conf")
    with open(conf, "w") as f:
        f.write(curl_config(env, lines))
    argv = ["curl", "-K", conf]
    if parallel:
        argv += ["--parallel", "--parallel-max", str(PARALLEL)]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True)
    took = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"curl: exit {r.returncode}: {r.stderr}")
    return took


def ceilings(tmp, env, objects):
    """PUT then GET of `objects` objects of 4 MiB, 16 at once: MB/s."""
    url = f'{env["S3_ENDPOINT"]}/{BUCKET}/ceiling'
    body = os.path.join(tmp, "object")
    with open(body, "wb") as f:
        f.write(os.urandom(OBJECT))
    puts = []
    for i in range(objects):
        puts += [f'upload-file = "{body}"', f'url = "{url}/{i}"',
                 'output = "/dev/null"']
    curl(tmp, env, puts[:3 * PARALLEL])  # connections and pools warmed
    write = objects * OBJECT / curl(tmp, env, puts) / 1e6
    drop_caches()
    gets = []
    for i in range(objects):
        gets += [f'url = "{url}/{i}"', 'output = "/dev/null"']
    read = objects * OBJECT / curl(tmp, env, gets) / 1e6
    dels = []
    for i in range(objects):
        dels += [f'url = "{url}/{i}"', 'request = "DELETE"',
                 'output = "/dev/null"']
    curl(tmp, env, dels)
    return write, read


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--smoke", action="store_true",
                    help="64 MiB, 1 pair")
    a = ap.parse_args()
    if a.smoke:
        a.mib, a.reps = 64, 1
    tmp = tempfile.mkdtemp(prefix="stagger-bench-s3-")
    d = os.path.join(tmp, "ceph")
    osd_gib = max(6, (a.mib * (2 * a.reps + 4)) // 1024 + 4)
    try:
        for cmd, extra in (("start", ["stagger", str(osd_gib)]), ("rgw", [])):
            r = cluster(cmd, d, *extra)
            if r.returncode != 0:
                print(f"bench/s3: scripts/ceph-cluster.sh {cmd} failed: "
                      f"{r.stdout}{r.stderr}", file=sys.stderr)
                sys.exit(2)
        env = dict(os.environ)
        with open(os.path.join(d, "rgw.env")) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                if k:
                    env[k] = v
        curl(tmp, env, [f'url = "{env["S3_ENDPOINT"]}/{BUCKET}"',
                        'request = "PUT"', 'output = "/dev/null"'],
             parallel=False)
        runs = [ceilings(tmp, env, max(PARALLEL * 2, a.mib // 4))
                for _ in range(a.reps)]
        write = statistics.median(w for w, _ in runs)
        read = statistics.median(r for _, r in runs)
        print(f"curl: PUT {write:.0f} MB/s, GET {read:.0f} MB/s (medians of "
              f"{[round(w) for w, _ in runs]} / {[round(r) for _, r in runs]};"
              f" 4 MiB objects, {PARALLEL} in flight)")
        m = measure(tmp, ["--s3-bucket", BUCKET, "--s3-endpoint",
                          env["S3_ENDPOINT"], "--s3-prefix", "bench"],
                    a.mib, a.reps, "the bucket", env)
        print(result("s3", m, write, read))
    finally:
        cluster("stop", d)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
