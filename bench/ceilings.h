// Same-run ceilings the drivers compare stagger against: sequential write
// and read bandwidth of a directory's disk (a small io_uring writer and
// reader) and UCX loopback bandwidth (stagger's own transport with a
// handler that replies at once). Each returns what it measured; nothing
// here is stagger's path.
#ifndef STAGGER_BENCH_CEILINGS_H_
#define STAGGER_BENCH_CEILINGS_H_

#include <cstdint>
#include <string>

#include "stagger/status.h"

namespace stagger::bench {

struct DiskWriteResult {
  double seconds = 0;  // first submit to fdatasync done
  uint64_t bytes = 0;
  bool direct = false;  // false: O_DIRECT was refused, buffered writes
  // false: the filesystem could not reserve the file's space up front, so
  // the writes extended it.
  bool preallocated = false;
  double GBps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// Writes `bytes` (rounded up to `block` bytes) sequentially to a new file
// in `dir` with io_uring, `queue_depth` writes of `block` bytes in flight,
// O_DIRECT (buffered if the filesystem refuses it), then fdatasync. The
// file's space is reserved (fallocate) before the clock starts, where the
// filesystem can. The file is removed afterwards. UNAVAILABLE on I/O
// errors, RESOURCE_EXHAUSTED when the disk cannot hold it, naming the file.
Result<DiskWriteResult> MeasureDiskWrite(const std::string& dir, uint64_t bytes,
                                         uint64_t block = 4ull << 20,
                                         unsigned queue_depth = 8);

struct DiskReadResult {
  double seconds = 0;  // first submit to last read completed
  uint64_t bytes = 0;
  // false: O_DIRECT was refused; buffered reads after the file's cached
  // pages were dropped (posix_fadvise DONTNEED).
  bool direct = false;
  double GBps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// Writes a file of `bytes` (rounded up to `block` bytes) in `dir` as
// MeasureDiskWrite does (untimed), then reads it back sequentially with
// io_uring, `queue_depth` reads of `block` bytes in flight, O_DIRECT
// (buffered if the filesystem refuses it), so the page cache does not
// serve it. The file is removed afterwards. UNAVAILABLE on I/O errors.
Result<DiskReadResult> MeasureDiskRead(const std::string& dir, uint64_t bytes,
                                       uint64_t block = 4ull << 20,
                                       unsigned queue_depth = 8);

struct LinkResult {
  double seconds = 0;  // first call sent to last reply received
  uint64_t bytes = 0;
  double GBps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// Sends `bytes` (rounded up to `message` bytes) as calls with a `message`-
// byte payload over UCX on 127.0.0.1 to a listener that replies with an
// empty message at once, `inflight` calls outstanding. Sets UCX_TLS=sm,tcp
// when UCX_TLS is unset. UNAVAILABLE when UCX cannot start or a call fails.
Result<LinkResult> MeasureUcxLoopback(uint64_t bytes,
                                      uint64_t message = 4ull << 20,
                                      unsigned inflight = 16);

}  // namespace stagger::bench

#endif  // STAGGER_BENCH_CEILINGS_H_
