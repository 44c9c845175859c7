#include "metrics/process.h"

#include <dirent.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"

namespace stagger::metrics {
namespace {

// The fields of /proc/self/stat after the command name (field 3 on), or
// empty when it cannot be read. The name may hold spaces and parentheses:
// fields start after the last ')'.
std::vector<std::string> StatFields() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  if (!std::getline(f, line)) return {};
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> out;
  for (std::string field; rest >> field;) out.push_back(field);
  return out;
}

// Seconds since the epoch at which the machine booted (/proc/stat btime).
bool BootTime(double* out) {
  std::ifstream f("/proc/stat");
  for (std::string key; f >> key;) {
    if (key == "btime") {
      uint64_t t = 0;
      if (!(f >> t)) return false;
      *out = static_cast<double>(t);
      return true;
    }
    f.ignore(1 << 20, '\n');
  }
  return false;
}

int OpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the directory being read
}

}  // namespace

void WriteStandardFamilies(TextWriter& w, const std::string& component,
                           const std::string& version, int format_version) {
  w.Gauge("stagger_build_info",
          "Always 1: the stagger version and on-disk format of this process.",
          1,
          {{"component", component},
           {"version", version},
           {"format", std::to_string(format_version)}});
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  // Fields 14 utime, 15 stime, 22 starttime, 23 vsize, 24 rss: indexes
  // 11, 12, 19, 20, 21 here (field 3 is index 0).
  const std::vector<std::string> f = StatFields();
  uint64_t utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
  if (f.size() > 21 && absl::SimpleAtoi(f[11], &utime) &&
      absl::SimpleAtoi(f[12], &stime) && absl::SimpleAtoi(f[19], &start) &&
      absl::SimpleAtoi(f[20], &vsize) && absl::SimpleAtoi(f[21], &rss) &&
      ticks > 0) {
    w.Counter("process_cpu_seconds_total",
              "Total user and system CPU time spent in seconds.",
              static_cast<double>(utime + stime) / ticks);
    w.Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.",
            static_cast<double>(vsize));
    w.Gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
            static_cast<double>(rss) * page);
    double boot = 0;
    if (BootTime(&boot)) {
      w.Gauge("process_start_time_seconds",
              "Start time of the process since unix epoch in seconds.",
              boot + static_cast<double>(start) / ticks);
    }
  }
  const int fds = OpenFds();
  if (fds >= 0) {
    w.Gauge("process_open_fds", "Number of open file descriptors.", fds);
  }
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    w.Gauge("process_max_fds", "Maximum number of open file descriptors.",
            static_cast<double>(lim.rlim_cur));
  }
  // What the process holds, unlike its RSS: a daemon that keeps freed
  // memory for reuse (stagger-server does) never shrinks its RSS.
  const struct mallinfo2 mi = ::mallinfo2();
  w.Gauge("stagger_heap_in_use_bytes",
          "Bytes the allocator has handed out and not had back (glibc "
          "mallinfo2: arenas' allocated bytes plus mmapped blocks).",
          static_cast<double>(mi.uordblks + mi.hblkhd));
}

}  // namespace stagger::metrics
