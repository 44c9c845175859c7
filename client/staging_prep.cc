#include "client/staging_prep.h"

#include <pthread.h>

#include <utility>

#include "client/shaping.h"

namespace stagger::client {

StagingPrep::StagingPrep(Prepare prepare, bool low_priority)
    : prepare_(std::move(prepare)), low_priority_(low_priority) {}

StagingPrep::~StagingPrep() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    pending_ = false;
    cancel_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void StagingPrep::Request(uint64_t bytes, absl::Duration quiet) {
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  pending_ = true;
  bytes_ = bytes;
  due_ = absl::Now() + quiet;
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void StagingPrep::Settle() {
  absl::MutexLock lock(&mu_);
  pending_ = false;
  cancel_ = true;
  mu_.Await(absl::Condition(
      +[](bool* running) { return !*running; }, &running_));
}

int StagingPrep::runs() const {
  absl::MutexLock lock(&mu_);
  return runs_;
}

Status StagingPrep::last_status() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

void StagingPrep::Loop() {
  pthread_setname_np(pthread_self(), "stg-prep");
  if (low_priority_) LowerBackgroundThread();
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || pending_;
    };
    mu_.Await(absl::Condition(&ready));
    if (stop_) return;
    // Quiet: wait out the due time, which each newer request moves later.
    // Requests do not wake this wait (one comes per tensor registered);
    // only Settle or stop, which drop the request, do.
    auto dropped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || !pending_;
    };
    while (!dropped() && absl::Now() < due_) {
      mu_.AwaitWithDeadline(absl::Condition(&dropped), due_);
    }
    if (dropped()) {
      if (stop_) return;
      continue;
    }
    pending_ = false;
    running_ = true;
    cancel_ = false;
    const uint64_t bytes = bytes_;
    mu_.Unlock();
    Status s = prepare_(bytes, [this] { return cancel_.load(); });
    mu_.Lock();
    running_ = false;
    ++runs_;
    last_ = std::move(s);
  }
}

}  // namespace stagger::client
