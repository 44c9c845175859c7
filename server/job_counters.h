// JobCounters: the server's byte counters per job, for the metrics page.
// Label cardinality is bounded: the first kMaxJobs jobs seen get their own
// row, the rest are summed under kOtherJobs (a label value no job name can
// take: names match [A-Za-z0-9._-]).
//
// Thread-safety: thread-safe.
#ifndef STAGGER_SERVER_JOB_COUNTERS_H_
#define STAGGER_SERVER_JOB_COUNTERS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"

namespace stagger::server {

struct JobBytes {
  uint64_t received = 0;  // put payload bytes taken in
  uint64_t written = 0;   // payload bytes stored durable
  uint64_t read = 0;      // payload bytes sent to readers
};

class JobCounters {
 public:
  static constexpr size_t kMaxJobs = 64;
  static constexpr char kOtherJobs[] = "(other)";

  void AddReceived(const std::string& job, uint64_t n) { Add(job, n, 0, 0); }
  void AddWritten(const std::string& job, uint64_t n) { Add(job, 0, n, 0); }
  void AddRead(const std::string& job, uint64_t n) { Add(job, 0, 0, n); }

  // Every row, by job (kOtherJobs last only if any went there).
  std::map<std::string, JobBytes> Snapshot() const;

 private:
  void Add(const std::string& job, uint64_t received, uint64_t written,
           uint64_t read);
  mutable absl::Mutex mu_;
  std::map<std::string, JobBytes> rows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_JOB_COUNTERS_H_
