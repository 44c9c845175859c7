#!/usr/bin/env python3
"""Other work on a trainer node's cores for bench/fabric --cpu-load: busy
for --busy-ms of every --period-ms (10 of 20 by default, as a data loader
decoding batches is), until killed or --seconds have passed. The busy part
spins on the clock, so it takes a core whatever the machine's speed."""
import argparse
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--busy-ms", type=float, default=10.0)
    p.add_argument("--period-ms", type=float, default=20.0)
    p.add_argument("--seconds", type=float, default=3600.0)
    a = p.parse_args()
    if not 0 < a.busy_ms <= a.period_ms:
        p.error("--busy-ms must be in (0, --period-ms]")
    busy, period = a.busy_ms / 1e3, a.period_ms / 1e3
    end = time.monotonic() + a.seconds
    start = time.monotonic()
    while start < end:
        while time.monotonic() - start < busy:
            pass
        rest = start + period - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        # The next period starts on the schedule, not after an overrun.
        start = max(start + period, time.monotonic() - period)


if __name__ == "__main__":
    main()
