// StagingPrep: sizes and faults in the default staging pool on a thread of
// its own, ahead of the first Save(), so that the first save does not fault
// its staging memory inside the training loop's stall.
//
// Request(bytes) is made as tensors are registered; the preparation starts
// once no new request came for `quiet` (registrations come in bursts, one
// per tensor), and runs `prepare(bytes)` on the thread (at idle CPU
// priority with `low_priority`: faulting memory zeroes it, which is CPU
// work of its own). A Save() calls Settle() first: a request still waiting
// is dropped (the save sizes the pool itself), and a preparation under way
// is cancelled and waited for (its current step), so that only one of them
// ever sizes the pool and a save never waits for the whole preparation.
//
// Thread-safety: thread-safe. The thread starts at the first Request; the
// destructor drops a waiting request and waits for a running one.
#ifndef STAGGER_CLIENT_STAGING_PREP_H_
#define STAGGER_CLIENT_STAGING_PREP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "stagger/status.h"

namespace stagger::client {

class StagingPrep {
 public:
  // Prepares for `bytes`; polls `cancelled` between steps and returns
  // early once it is true (a save has come).
  using Prepare = std::function<Status(uint64_t bytes,
                                       const std::function<bool()>& cancelled)>;
  StagingPrep(Prepare prepare, bool low_priority);
  ~StagingPrep();
  StagingPrep(const StagingPrep&) = delete;
  StagingPrep& operator=(const StagingPrep&) = delete;

  // Prepare for `bytes` once `quiet` passes without another request (this
  // one replaces any still waiting). Callers pass one quiet time: a
  // shorter one than a waiting request's does not start it sooner.
  void Request(uint64_t bytes, absl::Duration quiet);
  // Drops a waiting request, and cancels a preparation under way and
  // waits for it to return (after its current step).
  void Settle();
  // Preparations run so far, and the status of the last one.
  int runs() const;
  Status last_status() const;

 private:
  void Loop();

  const Prepare prepare_;
  const bool low_priority_;
  mutable absl::Mutex mu_;
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time due_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> cancel_{false};  // for the preparation running
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int runs_ ABSL_GUARDED_BY(mu_) = 0;
  Status last_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // started by the first Request
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_STAGING_PREP_H_
