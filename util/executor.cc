#include "util/executor.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace stagger {

Executor::Executor(int threads, std::string name,
                   std::function<void()> thread_init) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back(
        [this, name, thread_init] { Loop(name, thread_init); });
  }
}

std::vector<int> Executor::thread_ids() const {
  absl::MutexLock lock(&mu_);
  auto started = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return tids_.size() >= threads_.size();
  };
  mu_.Await(absl::Condition(&started));
  return tids_;
}

Executor::~Executor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void Executor::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

size_t Executor::queued() const {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

void Executor::Loop(const std::string& name,
                    const std::function<void()>& init) {
  if (!name.empty()) {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  }
  if (init) init();
  {
    absl::MutexLock lock(&mu_);
    tids_.push_back(static_cast<int>(syscall(SYS_gettid)));
  }
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Executor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
            return e->stopping_ || !e->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace stagger
