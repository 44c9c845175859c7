// Window: bounds the number of operations in flight and remembers the first
// error among them. Thread-safe.
#ifndef STAGGER_CLIENT_INTERNAL_WINDOW_H_
#define STAGGER_CLIENT_INTERNAL_WINDOW_H_

#include <cstddef>

#include "absl/synchronization/mutex.h"
#include "stagger/status.h"

namespace stagger::client_internal {

class Window {
 public:
  // With `stop_on_error`, Acquire refuses new operations after a failure;
  // without, every operation runs and Drain still reports the first error.
  explicit Window(size_t limit, bool stop_on_error = true)
      : limit_(limit == 0 ? 1 : limit), stop_on_error_(stop_on_error) {}

  // Blocks until fewer than `limit` operations are in flight, then counts one
  // more. Returns false (counting nothing) once an operation has failed and
  // the window stops on errors.
  bool Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Window::HasRoom));
    if (stop_on_error_ && !first_error_.ok()) return false;
    ++in_flight_;
    return true;
  }
  // Ends one operation with its outcome.
  void Release(const Status& s) {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (!s.ok() && first_error_.ok()) first_error_ = s;
  }
  // Waits for every operation; returns the first error, if any.
  Status Drain() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Window::Idle));
    return first_error_;
  }

 private:
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ < limit_ || (stop_on_error_ && !first_error_.ok());
  }
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ == 0;
  }
  absl::Mutex mu_;
  const size_t limit_;
  const bool stop_on_error_;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::client_internal

#endif  // STAGGER_CLIENT_INTERNAL_WINDOW_H_
