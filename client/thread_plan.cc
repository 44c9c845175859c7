#include "client/thread_plan.h"

#include <algorithm>

#include "client/shaping.h"

namespace stagger::client {

ThreadPlan PlanThreads(const CheckpointerOptions& o, const qos::CpuShare& cpu) {
  ThreadPlan p;
  p.cpu = cpu;
  p.copy_threads = std::clamp(cpu.cores, 1, 4);
  p.pipeline_threads =
      o.pipeline_threads > 0 ? o.pipeline_threads : std::clamp(cpu.cores, 1, 8);
  p.encoder_threads = std::min(p.pipeline_threads, std::max(1, cpu.cores - 1));
  if (o.background_cpu == BackgroundCpu::kIdle) {
    p.background_init = [] { LowerBackgroundThread(); };
  }
  return p;
}

}  // namespace stagger::client
