// ThreadPlan: how many threads a Checkpointer runs for its saves, and at
// what CPU priority, from its options and the cores this process may use
// (qos/README.md, "CPU").
//
// Thread-safety: a plain value.
#ifndef STAGGER_CLIENT_THREAD_PLAN_H_
#define STAGGER_CLIENT_THREAD_PLAN_H_

#include <functional>

#include "qos/cpu_share.h"
#include "stagger/options.h"

namespace stagger::client {

struct ThreadPlan {
  qos::CpuShare cpu;
  // The snapshot's copies: Save() (or BeforeUpdate()) waits for them, so
  // they keep normal priority. min(cores, 4).
  int copy_threads = 1;
  // Fingerprint and encode ("stg-encode"): pipeline_threads, else the
  // cores, at most 8.
  int pipeline_threads = 1;
  // What the codec policy counts as encoding in parallel: the cores the
  // data path leaves (one core moves bytes to the wire however many
  // encode).
  int encoder_threads = 1;
  // Runs first on each background thread: the lowest priority with
  // background_cpu "idle" (LowerBackgroundThread); null with "normal".
  std::function<void()> background_init;

  // Host copies leave cores for shipping while they run (snapshot_overlap
  // "auto"): as many cores again as copy threads.
  bool HostCopiesLeaveCores() const { return cpu.cores >= 2 * copy_threads; }
};

ThreadPlan PlanThreads(const CheckpointerOptions& o, const qos::CpuShare& cpu);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_THREAD_PLAN_H_
