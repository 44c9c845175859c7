#include "transport/internal/serial_executor.h"

#include <pthread.h>

#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace stagger::transport_internal {

struct SerialExecutor::State {
  absl::Mutex mu;
  std::deque<Task> tasks ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool discard ABSL_GUARDED_BY(mu) = false;
  absl::Mutex join_mu;  // serialises Stop()

  // The thread owns a reference, so it may outlive the executor when it
  // was stopped from inside a task.
  static void Run(std::shared_ptr<State> self, std::string name) {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    for (;;) {
      Task task;
      std::deque<Task> dropped;  // destroyed outside the lock
      {
        absl::MutexLock l(&self->mu);
        self->mu.Await(absl::Condition(
            +[](State* s) { return s->stopping || !s->tasks.empty(); },
            self.get()));
        if (self->tasks.empty() || self->discard) {
          dropped.swap(self->tasks);
        } else {
          task = std::move(self->tasks.front());
          self->tasks.pop_front();
        }
      }
      if (!task) return;
      task();
    }
  }
};

SerialExecutor::SerialExecutor(std::string thread_name)
    : state_(std::make_shared<State>()) {
  thread_ = std::thread(&State::Run, state_, std::move(thread_name));
  thread_id_.store(thread_.get_id());
}

SerialExecutor::~SerialExecutor() { Stop(Pending::kRun); }

bool SerialExecutor::Post(Task task) {
  if (!task) return true;  // nothing to run
  absl::MutexLock l(&state_->mu);
  if (state_->stopping) return false;
  state_->tasks.push_back(std::move(task));
  return true;
}

void SerialExecutor::Stop(Pending pending) {
  {
    absl::MutexLock l(&state_->mu);
    if (!state_->stopping) {
      state_->stopping = true;
      state_->discard = pending == Pending::kDiscard;
    }
  }
  absl::MutexLock l(&state_->join_mu);
  if (!thread_.joinable()) return;
  if (OnExecutorThread()) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

}  // namespace stagger::transport_internal
