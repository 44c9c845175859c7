#include "qos/cpu_share.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace stagger::qos {
namespace {

// include/uapi/linux/ioprio.h
constexpr int kIoprioWhoProcess = 1;
constexpr int kIoprioClassShift = 13;
constexpr int kIoprioClassIdle = 3;

bool ReadSmallFile(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// Debian's Abseil has a string_view of its own.
absl::string_view Trim(std::string_view s) {
  return absl::StripAsciiWhitespace(absl::string_view(s.data(), s.size()));
}

// The smallest quota of the v2 cgroup at `path` (under `root`) and its
// ancestors up to the root; 0 when none has one.
double V2Quota(const std::string& root, std::string path) {
  double best = 0;
  for (;;) {
    std::string text;
    if (ReadSmallFile(absl::StrCat(root, path, "/cpu.max"), &text)) {
      Result<double> q = ParseCpuMax(text);
      if (q.ok() && *q > 0) best = best > 0 ? std::min(best, *q) : *q;
    }
    if (path.empty() || path == "/") break;
    size_t slash = path.rfind('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  return best;
}

double V1Quota(const std::string& root, const std::string& controllers,
               const std::string& path) {
  // The hierarchy is mounted under its controller list's name
  // ("cpu,cpuacct"), often with "cpu" as a link to it.
  for (const std::string& dir : {controllers, std::string("cpu")}) {
    std::string quota, period;
    const std::string base = absl::StrCat(root, "/", dir, path);
    if (ReadSmallFile(base + "/cpu.cfs_quota_us", &quota) &&
        ReadSmallFile(base + "/cpu.cfs_period_us", &period)) {
      Result<double> q = ParseCfsQuota(quota, period);
      return q.ok() ? *q : 0;
    }
  }
  return 0;
}

}  // namespace

int LocalWorldSize() {
  const char* env = std::getenv("LOCAL_WORLD_SIZE");
  long n = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
  return n > 0 && n < (1 << 20) ? static_cast<int>(n) : 1;
}

Result<double> ParseCpuMax(std::string_view text) {
  std::vector<absl::string_view> f =
      absl::StrSplit(Trim(text), ' ', absl::SkipEmpty());
  double quota = 0, period = 0;
  if (f.size() == 2 && f[0] == "max" && absl::SimpleAtod(f[1], &period) &&
      period > 0) {
    return 0.0;
  }
  if (f.size() != 2 || !absl::SimpleAtod(f[0], &quota) ||
      !absl::SimpleAtod(f[1], &period) || !(quota > 0) || !(period > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu.max '", Trim(text), "' is not 'max PERIOD' or 'QUOTA PERIOD'"));
  }
  return quota / period;
}

Result<double> ParseCfsQuota(std::string_view quota_us,
                             std::string_view period_us) {
  double quota = 0, period = 0;
  if (!absl::SimpleAtod(Trim(quota_us), &quota) ||
      !absl::SimpleAtod(Trim(period_us), &period) || !(period > 0) ||
      (quota <= 0 && quota != -1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu.cfs_quota_us '", Trim(quota_us), "' / cpu.cfs_period_us '",
        Trim(period_us), "' is not a quota (-1 or > 0) over a period (> 0)"));
  }
  return quota < 0 ? 0.0 : quota / period;
}

double CgroupQuotaCores(std::string_view proc_self_cgroup,
                        const std::string& cgroup_root) {
  double best = 0;
  auto take = [&best](double q) {
    if (q > 0) best = best > 0 ? std::min(best, q) : q;
  };
  for (absl::string_view line : absl::StrSplit(
           absl::string_view(proc_self_cgroup.data(), proc_self_cgroup.size()),
           '\n', absl::SkipEmpty())) {
    // "ID:CONTROLLERS:PATH"; v2 is "0::PATH".
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    std::string path(Trim(std::string_view(f[2].data(), f[2].size())));
    if (path == "/") path.clear();
    if (f[0] == "0" && f[1].empty()) {
      take(V2Quota(cgroup_root, path));
      continue;
    }
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "cpu") {
        take(V1Quota(cgroup_root, std::string(f[1]), path));
        break;
      }
    }
  }
  return best;
}

CpuShare CombineCpuShare(int affinity, double quota, int local_ranks) {
  CpuShare s;
  s.affinity_cores = std::max(1, affinity);
  s.quota_cores = quota > 0 ? quota : 0;
  s.local_ranks = std::max(1, local_ranks);
  double usable = s.affinity_cores;
  if (s.quota_cores > 0) usable = std::min(usable, s.quota_cores);
  s.cores =
      std::max(1, static_cast<int>(std::floor(usable / s.local_ranks + 1e-9)));
  return s;
}

CpuShare ReadCpuShare() {
  int affinity = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    affinity = CPU_COUNT(&set);
  } else {
    affinity = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  }
  std::string cgroup;
  double quota = 0;
  if (ReadSmallFile("/proc/self/cgroup", &cgroup)) {
    quota = CgroupQuotaCores(cgroup, "/sys/fs/cgroup");
  }
  return CombineCpuShare(affinity, quota, LocalWorldSize());
}

const char* BackgroundPriorityName(BackgroundPriority p) {
  switch (p) {
    case BackgroundPriority::kIdle:
      return "idle";
    case BackgroundPriority::kNice19:
      return "nice19";
    case BackgroundPriority::kNormal:
      return "normal";
  }
  return "?";
}

int ThisThreadId() { return static_cast<int>(syscall(SYS_gettid)); }

BackgroundPriority LowerThisThread() {
  // The idle I/O class first: it is independent of the CPU policy. A
  // refusal leaves the thread's class as it was (best effort).
  syscall(SYS_ioprio_set, kIoprioWhoProcess, 0,
          kIoprioClassIdle << kIoprioClassShift);
  sched_param param{};
  param.sched_priority = 0;
  // pid 0: the calling thread (Linux schedules threads, not processes).
  if (sched_setscheduler(0, SCHED_IDLE, &param) == 0) {
    return BackgroundPriority::kIdle;
  }
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(ThisThreadId()), 19) == 0) {
    return BackgroundPriority::kNice19;
  }
  return BackgroundPriority::kNormal;
}

Result<ThreadSched> ReadThreadSched(int tid) {
  std::string stat;
  if (!ReadSmallFile(absl::StrCat("/proc/self/task/", tid, "/stat"), &stat)) {
    return absl::NotFoundError(absl::StrCat("thread ", tid, " is gone"));
  }
  // The command name may hold spaces and parentheses: fields follow the
  // last ')'. After it come field 3 (state) onwards.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) {
    return absl::DataLossError(absl::StrCat("thread ", tid, ": bad stat"));
  }
  std::vector<absl::string_view> f = absl::StrSplit(
      absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  ThreadSched t;
  // nice is field 19, policy field 41 (proc(5)).
  if (f.size() < 39 || !absl::SimpleAtoi(f[19 - 3], &t.nice) ||
      !absl::SimpleAtoi(f[41 - 3], &t.policy)) {
    return absl::DataLossError(absl::StrCat("thread ", tid, ": bad stat"));
  }
  long io = syscall(SYS_ioprio_get, kIoprioWhoProcess, tid);
  t.io_class = io < 0 ? 0 : static_cast<int>(io >> kIoprioClassShift);
  return t;
}

}  // namespace stagger::qos
