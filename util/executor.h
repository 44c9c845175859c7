// Executor: a fixed pool of worker threads running queued tasks in FIFO
// order. The pipelines of client and server run their CPU and blocking I/O
// work here, off the transport's progress threads.
//
// Thread-safe. The destructor runs every task already queued, then joins.
#ifndef STAGGER_UTIL_EXECUTOR_H_
#define STAGGER_UTIL_EXECUTOR_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace stagger {

class Executor {
 public:
  // Starts `threads` workers (at least 1). Each runs `thread_init` (if
  // set) once before its first task, and is named `name` (at most 15
  // characters are kept; empty: unnamed), as `top -H` shows it.
  explicit Executor(int threads, std::string name = "",
                    std::function<void()> thread_init = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Submit(std::function<void()> task);
  // Tasks queued and not yet started.
  size_t queued() const;
  // The kernel's ids of the workers (for tests that read /proc), once
  // every worker has started.
  std::vector<int> thread_ids() const;

 private:
  void Loop(const std::string& name, const std::function<void()>& init);
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> tids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace stagger

#endif  // STAGGER_UTIL_EXECUTOR_H_
