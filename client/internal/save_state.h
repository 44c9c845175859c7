// The state a SaveHandle shares with the save that fills it.
#ifndef STAGGER_CLIENT_INTERNAL_SAVE_STATE_H_
#define STAGGER_CLIENT_INTERNAL_SAVE_STATE_H_

#include <cstdint>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "stagger/checkpointer.h"

namespace stagger {

class SaveHandle::State {
 public:
  explicit State(int64_t step) : step_(step) {}

  // Publishes the outcome; later calls are ignored.
  void Finish(const Status& s, const SaveStats& stats) {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    status_ = s;
    stats_ = stats;
    done_ = true;
  }
  // Adds time a caller spent blocked on this save (lazy mode's
  // BeforeUpdate) to its stall, before or after it finished.
  void AddStall(double s) {
    absl::MutexLock lock(&mu_);
    extra_stall_s_ += s;
  }
  Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }
  // The outcome, or nullopt when the save is still running after
  // `timeout`.
  std::optional<Status> WaitFor(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) {
      return std::nullopt;
    }
    return status_;
  }
  bool Done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  SaveStats stats() {
    absl::MutexLock lock(&mu_);
    SaveStats s = stats_;
    s.stall_s += extra_stall_s_;
    return s;
  }
  int64_t step() const { return step_; }

 private:
  const int64_t step_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  Status status_ ABSL_GUARDED_BY(mu_);
  SaveStats stats_ ABSL_GUARDED_BY(mu_);
  double extra_stall_s_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stagger

#endif  // STAGGER_CLIENT_INTERNAL_SAVE_STATE_H_
