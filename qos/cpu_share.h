// CPU as a resource QoS schedules (docs/design.md section 6, item 5): how many
// cores a process may use (its affinity mask, its cgroup's CPU quota, the
// ranks that share the node), and the lowest CPU and I/O priority a
// background thread can take, so that checkpoint work runs on cycles the
// training job leaves idle.
//
// Thread-safety: every function is safe to call from any thread; the
// priority calls change the calling thread only.
#ifndef STAGGER_QOS_CPU_SHARE_H_
#define STAGGER_QOS_CPU_SHARE_H_

#include <string>
#include <string_view>

#include "stagger/status.h"

namespace stagger::qos {

// The cores this process may use, and where each figure came from.
struct CpuShare {
  int affinity_cores = 1;  // CPUs in the process's affinity mask
  double quota_cores = 0;  // cgroup CPU quota in cores; 0: no quota
  int local_ranks = 1;     // ranks sharing the node (LOCAL_WORLD_SIZE)
  // min(affinity, quota) / local_ranks, rounded down, at least 1.
  int cores = 1;
};

// cgroup v2 `cpu.max` ("max 100000" or "50000 100000"): the quota in cores,
// 0 for "max". INVALID_ARGUMENT naming the text when it is neither.
Result<double> ParseCpuMax(std::string_view text);
// cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`: the quota in
// cores, 0 for a quota of -1. INVALID_ARGUMENT naming the text otherwise.
Result<double> ParseCfsQuota(std::string_view quota_us,
                             std::string_view period_us);

// The CPU quota of the cgroup `proc_self_cgroup` (the text of
// /proc/self/cgroup) names, read under `cgroup_root` (/sys/fs/cgroup):
// the smallest quota of the cgroup and its ancestors (v2), or of its cpu
// controller's cgroup (v1). 0 when none is set or nothing can be read: a
// missing file is no limit, not an error.
double CgroupQuotaCores(std::string_view proc_self_cgroup,
                        const std::string& cgroup_root);

// `affinity` cores, `quota` cores (0: none) and `local_ranks` combined as
// CpuShare::cores says.
CpuShare CombineCpuShare(int affinity, double quota, int local_ranks);

// Ranks sharing this node: $LOCAL_WORLD_SIZE (as torchrun sets it), 1
// when unset or not a number in [1, 2^20).
int LocalWorldSize();

// This process's share, from sched_getaffinity, /proc/self/cgroup under
// /sys/fs/cgroup and LocalWorldSize().
CpuShare ReadCpuShare();

// How low a background thread's priority could be set.
enum class BackgroundPriority {
  kIdle,    // SCHED_IDLE: runs only on cycles no normal thread wants
  kNice19,  // SCHED_IDLE was refused; nice 19
  kNormal,  // both were refused (or not asked for); unchanged
};
const char* BackgroundPriorityName(BackgroundPriority p);

// Moves the calling thread to SCHED_IDLE (else nice 19) and the idle I/O
// class, and returns which CPU priority it got. Never fails: a refused
// change leaves the thread as it was.
BackgroundPriority LowerThisThread();

// A thread of this process as the kernel schedules it: its policy (0
// normal, 5 SCHED_IDLE) and nice value from /proc/self/task/<tid>/stat,
// its I/O class from ioprio_get (0 none, 1 realtime, 2 best effort, 3
// idle). NOT_FOUND for a thread that is gone.
struct ThreadSched {
  int policy = 0;
  int nice = 0;
  int io_class = 0;
};
Result<ThreadSched> ReadThreadSched(int tid);
// The calling thread's id (gettid).
int ThisThreadId();

}  // namespace stagger::qos

#endif  // STAGGER_QOS_CPU_SHARE_H_
