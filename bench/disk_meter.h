// DiskMeter: a stagger-server process whose disk a benchmark measures as
// `du` would (allocated blocks under its --data directory). Measure()
// waits for the directory to settle (the server rebases and compacts in
// the background), stops the server, so that the space it reserves ahead of its
// appends is given back, reads the sizes, and starts it again on the same
// address and directory: Checkpointers connected to it carry on (they
// reconnect).
//
// Thread-safety: not thread-safe; one owner.
#ifndef STAGGER_BENCH_DISK_METER_H_
#define STAGGER_BENCH_DISK_METER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/server_process.h"
#include "stagger/status.h"

namespace stagger::bench {

// Allocated bytes (st_blocks * 512) of the regular files under `path`; 0
// when it does not exist.
uint64_t DiskBytes(const std::string& path);

struct DiskUsage {
  std::map<std::string, uint64_t> jobs;  // segments/<job>, per job
  uint64_t meta = 0;                     // the index (RocksDB) and the rest
  uint64_t total = 0;                    // the whole data directory
  // Bytes the server process wrote to storage since it (re)started, as the
  // kernel counts them (/proc/PID/io write_bytes), read once it settled.
  uint64_t server_written = 0;
};

// /proc/`pid`/io write_bytes; 0 when it cannot be read.
uint64_t ProcessWriteBytes(pid_t pid);

class DiskMeter {
 public:
  // Starts `binary` on `data_dir` (created by the server).
  static Result<std::unique_ptr<DiskMeter>> Start(const std::string& binary,
                                                  const std::string& data_dir);
  const std::string& grpc_address() const { return grpc_; }
  // The data directory (segments/<job> holds a job's records).
  const std::string& data_dir() const { return data_; }
  // Waits for the directory to settle, stops the server, measures `jobs`,
  // starts it again.
  Result<DiskUsage> Measure(const std::vector<std::string>& jobs);

 private:
  DiskMeter() = default;
  std::string binary_, data_, grpc_;
  std::unique_ptr<ServerProcess> server_;
};

}  // namespace stagger::bench

#endif  // STAGGER_BENCH_DISK_METER_H_
