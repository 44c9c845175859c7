#include "server/job_counters.h"

namespace stagger::server {

void JobCounters::Add(const std::string& job, uint64_t received,
                      uint64_t written, uint64_t read) {
  absl::MutexLock lock(&mu_);
  auto it = rows_.find(job);
  if (it == rows_.end()) {
    // kOtherJobs holds one row of its own beyond the kMaxJobs.
    const size_t named = rows_.size() - rows_.count(kOtherJobs);
    it = rows_.try_emplace(named < kMaxJobs ? job : kOtherJobs).first;
  }
  it->second.received += received;
  it->second.written += written;
  it->second.read += read;
}

std::map<std::string, JobBytes> JobCounters::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return rows_;
}

}  // namespace stagger::server
