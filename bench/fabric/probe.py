#!/usr/bin/env python3
"""TCP goodput of one capped link, the ceiling bench/fabric measures.

  probe.py sink HOST:PORT              accept one connection, count its
                                       bytes, print {"goodput_Bps": ...}
  probe.py send HOST:PORT SECONDS      send zeros for SECONDS

The sink times from the first byte after a 0.5 s warm-up (TCP slow start,
the token bucket's initial burst) to the end of the stream.
"""
import json
import socket
import sys
import time

WARMUP_S = 0.5


def sink(host, port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1)
    ls.settimeout(60)
    conn, _ = ls.accept()
    buf = bytearray(1 << 20)
    start = None
    counted = 0
    first = None
    while True:
        k = conn.recv_into(buf)
        if k == 0:
            break
        now = time.perf_counter()
        if first is None:
            first = now
        if start is None:
            if now - first >= WARMUP_S:
                start = now
            continue
        counted += k
    end = time.perf_counter()
    conn.close()
    ls.close()
    if start is None or end <= start:
        sys.exit("probe.py: stream too short to measure")
    print(json.dumps({"goodput_Bps": counted / (end - start)}))


def send(host, port, seconds):
    deadline = time.monotonic() + 30
    while True:
        try:
            s = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    data = bytes(1 << 20)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.sendall(data)
    s.close()


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("sink", "send"):
        sys.exit(__doc__)
    host, port = sys.argv[2].rsplit(":", 1)
    if sys.argv[1] == "sink":
        sink(host, int(port))
    else:
        send(host, int(port), float(sys.argv[3]))


if __name__ == "__main__":
    main()
