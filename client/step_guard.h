// StepGuard: refuses, at Save(), a step this rank has already committed,
// before anything is copied or shipped. Steps are immutable (the
// coordinator refuses a second, different shard of a rank with ABORTED),
// so a script run twice with the same job name used to ship every byte of
// its first save before its commit failed.
//
// The job's steps are listed once (one ListSteps round trip), by Prime()
// at Open or else at the first check; the steps this Checkpointer commits
// are added as they commit. A listing that fails (no server answers yet)
// is retried at the next check, and the step goes on: the commit still
// refuses a conflict.
//
// Thread-safety: thread-safe.
#ifndef STAGGER_CLIENT_STEP_GUARD_H_
#define STAGGER_CLIENT_STEP_GUARD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "format/manifest.pb.h"
#include "stagger/status.h"

namespace stagger::client {

class StepGuard {
 public:
  using Lister = std::function<Result<std::vector<pb::StepInfo>>()>;
  StepGuard(std::string job, uint32_t rank, Lister list)
      : job_(std::move(job)), rank_(rank), list_(std::move(list)) {}

  // Lists the job's steps now, unless they were listed; a failure is left
  // for Check() to retry.
  void Prime();
  // OK when `step` may be saved; ABORTED naming the step, when this rank
  // committed it and how to go on (another job name, or `stagger rm`).
  Status Check(int64_t step);
  // This rank committed `step` (a save of it succeeded).
  void Committed(int64_t step);

 private:
  void ListLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string job_;
  const uint32_t rank_;
  const Lister list_;
  absl::Mutex mu_;
  bool listed_ ABSL_GUARDED_BY(mu_) = false;
  // Steps this rank committed -> when (Unix ms; 0: by this Checkpointer).
  std::map<int64_t, int64_t> committed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_STEP_GUARD_H_
