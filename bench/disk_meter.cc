#include "bench/disk_meter.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace stagger::bench {

uint64_t DiskBytes(const std::string& path) {
  namespace fs = std::filesystem;
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st;
    if (it->is_regular_file(ec) && ::stat(it->path().c_str(), &st) == 0) {
      n += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return n;
}

uint64_t ProcessWriteBytes(pid_t pid) {
  std::ifstream io("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "write_bytes:") return value;
  }
  return 0;
}

Result<std::unique_ptr<DiskMeter>> DiskMeter::Start(
    const std::string& binary, const std::string& data_dir) {
  std::unique_ptr<DiskMeter> m(new DiskMeter());
  m->binary_ = binary;
  m->data_ = data_dir;
  STAGGER_ASSIGN_OR_RETURN(m->server_, ServerProcess::Start(binary, data_dir));
  m->grpc_ = m->server_->grpc_address();
  return m;
}

Result<DiskUsage> DiskMeter::Measure(const std::vector<std::string>& jobs) {
  // The server's background work (rebasing deltas, compacting what that
  // leaves dead) first: until the directory has not changed for a second,
  // at most 120 s.
  uint64_t last = DiskBytes(data_);
  for (int i = 0, still = 0; i < 1200 && still < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const uint64_t now = DiskBytes(data_);
    still = now == last ? still + 1 : 0;
    last = now;
  }
  DiskUsage u;
  u.server_written = ProcessWriteBytes(server_->pid());
  server_.reset();  // SIGTERM: reservations are cut off as it closes
  u.total = DiskBytes(data_);
  for (const std::string& job : jobs) {
    u.jobs[job] = DiskBytes(data_ + "/segments/" + job);
  }
  u.meta = DiskBytes(data_ + "/meta");
  auto again = ServerProcess::Start(binary_, data_, 30, {"--listen", grpc_});
  if (!again.ok()) {
    return WithContext(again.status(),
                       absl::StrCat("restarting the server on ", grpc_));
  }
  server_ = std::move(*again);
  return u;
}

}  // namespace stagger::bench
