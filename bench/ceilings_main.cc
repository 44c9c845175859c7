// bench_ceilings: the machine's ceilings alone, for drivers outside C++
// (bench/peers/dcp.py prints them beside PyTorch DCP's and stagger's
// figures): sequential disk write and read of --dir's disk (io_uring,
// O_DIRECT, 4 MiB x 8) and UCX loopback over stagger's transport
// (4 MiB x 16), each the best of --iterations.
//
//   RESULT ceilings disk_write_GBps=... disk_read_GBps=... link_GBps=...
//          direct=1 ratio=disk_read_GBps/link_GBps
#include <stdio.h>

#include <algorithm>

#include "bench/ceilings.h"
#include "bench/common.h"

using namespace stagger;
using namespace stagger::bench;

int main(int argc, char** argv) {
  Flags flags("bench_ceilings",
              {{"dir", {"/tmp", "a directory on the disk to measure"}},
               {"size", {"1GiB", "bytes written, read and sent"}},
               {"iterations", {"2", "rounds (the best of each is kept)"}}});
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail("ceilings", s);
  if (flags.help()) {
    flags.PrintUsage();
    return 0;
  }
  auto size = flags.GetSize("size");
  if (!size.ok()) return Fail("ceilings", size.status());
  auto iterations = flags.GetInt("iterations");
  if (!iterations.ok()) return Fail("ceilings", iterations.status());
  if (*iterations < 1) {
    return Fail("ceilings",
                absl::InvalidArgumentError("--iterations must be at least 1"));
  }
  double write = 0, read = 0, link = 0;
  bool direct = true;
  for (int i = 0; i < *iterations; ++i) {
    auto w = MeasureDiskWrite(flags.Get("dir"), *size);
    if (!w.ok()) return Fail("ceilings", w.status());
    auto r = MeasureDiskRead(flags.Get("dir"), *size);
    if (!r.ok()) return Fail("ceilings", r.status());
    auto l = MeasureUcxLoopback(*size);
    if (!l.ok()) return Fail("ceilings", l.status());
    write = std::max(write, w->GBps());
    read = std::max(read, r->GBps());
    link = std::max(link, l->GBps());
    direct = direct && w->direct && r->direct;
  }
  printf(
      "RESULT ceilings disk_write_GBps=%.4g disk_read_GBps=%.4g "
      "link_GBps=%.4g direct=%d ratio=%.4g\n",
      write, read, link, direct ? 1 : 0, Div(read, link));
  return 0;
}
