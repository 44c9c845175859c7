#include "client/step_guard.h"

#include "absl/strings/str_cat.h"
#include "util/time_text.h"

namespace stagger::client {
namespace {

std::string When(int64_t unix_ms) {
  return unix_ms <= 0 ? "by this process" : "at " + UtcTimeText(unix_ms);
}

}  // namespace

void StepGuard::Prime() {
  absl::MutexLock lock(&mu_);
  ListLocked();
}

void StepGuard::ListLocked() {
  if (listed_) return;
  // Listed under the lock: saves are rare, and a second save waits for
  // the same answer instead of asking again.
  auto steps = list_();
  if (!steps.ok()) return;
  listed_ = true;
  for (const pb::StepInfo& s : *steps) {
    for (uint32_t r : s.committed_ranks()) {
      if (r == rank_) committed_.emplace(s.step(), s.created_unix_ms());
    }
  }
}

Status StepGuard::Check(int64_t step) {
  absl::MutexLock lock(&mu_);
  ListLocked();
  auto it = committed_.find(step);
  if (it == committed_.end()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "job '", job_, "' already has step ", step, " of rank ", rank_,
      " (saved ", When(it->second),
      "); steps cannot be overwritten: save under another job name, or "
      "delete the step first (stagger rm --job ",
      job_, " --step ", step, ")"));
}

void StepGuard::Committed(int64_t step) {
  absl::MutexLock lock(&mu_);
  committed_.emplace(step, 0);
}

}  // namespace stagger::client
