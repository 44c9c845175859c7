// SerialExecutor: one thread that runs posted tasks in order. The in-process
// transport uses one per Listener (request handlers) and one per Connection
// (reply callbacks), so that user code never runs on the caller's thread.
//
// Thread-safety: Post() and Stop() from any thread.
#ifndef STAGGER_TRANSPORT_INTERNAL_SERIAL_EXECUTOR_H_
#define STAGGER_TRANSPORT_INTERNAL_SERIAL_EXECUTOR_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"

namespace stagger::transport_internal {

class SerialExecutor {
 public:
  using Task = absl::AnyInvocable<void()>;
  enum class Pending { kRun, kDiscard };

  explicit SerialExecutor(std::string thread_name);
  // Stop(Pending::kRun).
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // Queues `task`. Returns false, without running it, after Stop() began.
  bool Post(Task task);

  // Stops accepting tasks, runs or discards (destroys unrun) the queued
  // ones, and waits for the thread. From the executor's own thread it does
  // not wait: the thread finishes after the current task returns.
  // Idempotent.
  void Stop(Pending pending);

  bool OnExecutorThread() const {
    return std::this_thread::get_id() == thread_id_.load();
  }

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
};

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_SERIAL_EXECUTOR_H_
