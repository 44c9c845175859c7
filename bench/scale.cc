// bench_scale: a write storm. --ranks ranks of one job, in --procs client
// processes (ranks / procs Checkpointers each, one process standing for
// one node), save --steps full checkpoints of --size bytes per rank to
// --servers stagger-server processes on loopback; every rank of a step is
// released at the same instant (a barrier before each step).
//
// Measured in the same run:
//   ceiling      the servers fed by a few big ranks instead (k per server,
//                k = 1, 2, 4, one process each, the same bytes per step):
//                the best aggregate rate of the three is the servers'
//                ingest ceiling on this machine
//   naive        the storm with default options (no deadline): every rank
//                sends at once, as fast as the servers admit it
//   qos          the storm with a deadline W (--deadline-s, or 2 x the time
//                a step's bytes take at the ceiling: the stagger schedule's
//                peak, twice its mean, then meets the ceiling); ranks start
//                at their stagger offsets and pace to their slot's end
// Per mode: aggregate rate = bytes of all steps / the sum over steps of
// release to the last rank durable; p50/p99 of per-rank durable time
// (release to its SaveHandle::Wait() returning, timed by the driver's
// child, not the library's stats); for qos, how far each rank ended behind
// its slot's end (qos/stagger_schedule.h) and how many ended after W;
// saves that failed; control-plane calls the ranks repeated after a busy
// answer; each server's peak RSS (sampled every 100 ms).
// Every step refills the state, so every save is a full checkpoint (codec
// raw: the servers are measured, not zstd). RESULT ratio = naive / ceiling.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/children.h"
#include "bench/common.h"
#include "bench/server_process.h"
#include "client/server_set.h"
#include "qos/stagger_schedule.h"
#include "stagger/checkpointer.h"

namespace stagger::bench {
namespace {

// CPU time (user + system) of this process so far.
double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// CPU time of process `pid` so far (0 when it cannot be read).
double CpuSecondsOf(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(f)),
                   std::istreambuf_iterator<char>());
  const size_t at = stat.rfind(')');
  if (at == std::string::npos || at + 2 > stat.size()) return 0;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(at + 2), ' ');
  uint64_t utime = 0, stime = 0;  // fields 14 and 15 of the line
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return 0;
  }
  return double(utime + stime) / ::sysconf(_SC_CLK_TCK);
}

// ---- The child: COUNT ranks from FIRST, of a job of WORLD. ----

struct ChildArgs {
  std::string servers, job;
  uint64_t first = 0, count = 0, world = 0, bytes = 0, steps = 0;
  double deadline_s = 0;
};

// argv: --child SERVERS JOB FIRST COUNT WORLD BYTES STEPS DEADLINE_S.
bool ParseChild(int argc, char** argv, ChildArgs* a) {
  if (argc != 10) return false;
  a->servers = argv[2];
  a->job = argv[3];
  return absl::SimpleAtoi(argv[4], &a->first) &&
         absl::SimpleAtoi(argv[5], &a->count) &&
         absl::SimpleAtoi(argv[6], &a->world) &&
         absl::SimpleAtoi(argv[7], &a->bytes) &&
         absl::SimpleAtoi(argv[8], &a->steps) &&
         absl::SimpleAtod(argv[9], &a->deadline_s) && a->count > 0;
}

// One step of every rank of this process: Save() on each, then a thread
// per rank waits for its handle. Prints "r RANK t SECONDS" (release to
// durable) or "fail RANK MESSAGE" per rank.
void SaveStep(std::vector<std::unique_ptr<Checkpointer>>& cks,
              const ChildArgs& a, int64_t step) {
  const auto release = Clock::now();
  std::vector<std::thread> waiters;
  std::mutex mu;
  std::vector<std::string> lines(cks.size());
  for (size_t i = 0; i < cks.size(); ++i) {
    auto h = cks[i]->Save(step);
    const uint64_t rank = a.first + i;
    if (!h.ok()) {
      lines[i] = absl::StrCat("fail ", rank, " ", h.status().ToString());
      continue;
    }
    waiters.emplace_back([&, i, rank, h = std::move(*h)]() mutable {
      Status s = h.Wait();
      const double t = SecondsSince(release);
      std::lock_guard<std::mutex> lock(mu);
      lines[i] = s.ok() ? absl::StrCat("r ", rank, " t ", t)
                        : absl::StrCat("fail ", rank, " ", s.ToString());
    });
  }
  for (std::thread& w : waiters) w.join();
  for (const std::string& l : lines) printf("%s\n", l.c_str());
}

// Prints "ready", then per step refills the state, prints "filled N;",
// waits for a byte on stdin, saves, and prints the ranks' lines and
// "saved N;"; then "done".
int ChildMain(int argc, char** argv) {
  ChildArgs a;
  if (!ParseChild(argc, argv, &a)) return 2;
  std::vector<std::unique_ptr<Checkpointer>> cks;
  std::vector<std::vector<uint64_t>> states(a.count);
  for (uint64_t i = 0; i < a.count; ++i) {
    CheckpointerOptions o;
    o.servers = a.servers;
    o.job = a.job;
    o.rank = static_cast<uint32_t>(a.first + i);
    o.world_size = static_cast<uint32_t>(a.world);
    o.ranks_per_node = static_cast<uint32_t>(a.count);  // a process = a node
    o.qos_deadline_s = a.deadline_s;
    o.codec = CodecChoice::kRaw;
    o.staging_bytes =
        (a.bytes + o.chunk_size - 1) / o.chunk_size * o.chunk_size;
    auto ck = Checkpointer::Open(o);
    if (!ck.ok()) {
      printf("error %s\n", ck.status().ToString().c_str());
      return 1;
    }
    states[i].resize((a.bytes + 7) / 8);
    Status s =
        (*ck)->Register({"state", "U8", {int64_t(a.bytes)}, states[i].data()});
    if (!s.ok()) {
      printf("error %s\n", s.ToString().c_str());
      return 1;
    }
    cks.push_back(std::move(*ck));
  }
  std::mt19937_64 rng(a.first * 7919 + 1);
  const uint64_t busy_at_open = client::BusyRetries();
  double cpu_in_saves = 0;  // this process's CPU time while its ranks saved
  printf("ready\n");
  fflush(stdout);
  for (uint64_t step = 1; step <= a.steps; ++step) {
    for (auto& state : states) {
      for (uint64_t& x : state) x = rng();  // all new: a full checkpoint
    }
    // Refilled: the driver's clock starts only once every process is.
    printf("filled %llu;\n", static_cast<unsigned long long>(step));
    fflush(stdout);
    char go;
    if (::read(0, &go, 1) != 1) return 1;
    const double cpu_before = CpuSeconds();
    SaveStep(cks, a, static_cast<int64_t>(step));
    cpu_in_saves += CpuSeconds() - cpu_before;
    printf("saved %llu;\n", static_cast<unsigned long long>(step));
    fflush(stdout);
  }
  // Control-plane calls this process's saves repeated after a busy answer.
  printf("busy %llu\ncpu %.6f\ndone\n",
         static_cast<unsigned long long>(client::BusyRetries() - busy_at_open),
         cpu_in_saves);
  fflush(stdout);
  return 0;
}

// ---- The parent. ----

struct Run {
  double seconds = 0;  // sum over steps of release to the last rank durable
  std::vector<double> durable;                     // per rank and step
  std::vector<std::pair<uint64_t, double>> ranks;  // (rank, durable) each
  std::vector<double> behind;  // durable - its stagger slot's end (qos)
  uint64_t failed = 0;
  uint64_t busy = 0;        // control-plane calls repeated after a busy answer
  double client_cpu_s = 0;  // the clients' CPU time while their ranks saved
  double server_cpu_s = 0;  // the servers' CPU time over the steps
  std::string first_failure;
  std::vector<uint64_t> peak_rss;  // per server
};

struct Job {
  std::string servers, name;
  uint64_t ranks = 0, procs = 0, bytes = 0, steps = 0;
  double deadline_s = 0;
};

// Reads the ranks' lines of a child's output into `run`.
void Collect(const std::string& out, const Job& job, Run* run) {
  size_t at = 0;
  while (at < out.size()) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(at, end - at);
    at = end + 1;
    uint64_t rank = 0;
    double t = 0;
    if (sscanf(line.c_str(), "busy %lu", &rank) == 1) {
      run->busy += rank;
    } else if (sscanf(line.c_str(), "cpu %lf", &t) == 1) {
      run->client_cpu_s += t;
    } else if (line.rfind("fail ", 0) == 0) {
      if (run->failed++ == 0) run->first_failure = line;
    } else if (sscanf(line.c_str(), "r %lu t %lf", &rank, &t) == 2) {
      run->durable.push_back(t);
      run->ranks.emplace_back(rank, t);
      if (job.deadline_s <= 0) continue;
      qos::StaggerOptions so;
      so.rank = static_cast<int>(rank);
      so.world_size = static_cast<int>(job.ranks);
      so.ranks_per_node = static_cast<int>(job.ranks / job.procs);
      so.window_ns = static_cast<int64_t>(job.deadline_s * 1e9);
      auto slot = qos::ComputeStaggerSlot(so);
      if (slot.ok()) run->behind.push_back(t - slot->deadline_offset_ns / 1e9);
    }
  }
}

// Runs `job` (ranks spread evenly over procs); samples the servers' RSS.
Result<Run> RunJob(const Job& job, const std::vector<pid_t>& server_pids) {
  std::vector<Child> kids;
  const uint64_t per = job.ranks / job.procs;
  for (uint64_t p = 0; p < job.procs; ++p) {
    auto k =
        SpawnChild({"bench_scale", "--child", job.servers, job.name,
                    std::to_string(p * per), std::to_string(per),
                    std::to_string(job.ranks), std::to_string(job.bytes),
                    std::to_string(job.steps), absl::StrCat(job.deadline_s)});
    if (!k.ok()) return k.status();
    kids.push_back(*k);
  }
  Run run;
  run.peak_rss.assign(server_pids.size(), 0);
  auto sample = [&] {
    for (size_t i = 0; i < server_pids.size(); ++i) {
      run.peak_rss[i] = std::max(run.peak_rss[i], RssBytes(server_pids[i]));
    }
  };
  Status s = WaitFor(kids, "ready", 300);
  for (uint64_t step = 1; s.ok() && step <= job.steps; ++step) {
    s = WaitFor(kids, absl::StrCat("filled ", step, ";"), 600);
    if (!s.ok()) break;
    double cpu = 0;
    for (pid_t p : server_pids) cpu -= CpuSecondsOf(p);
    const auto start = Clock::now();
    for (Child& k : kids) (void)!::write(k.to, "g", 1);
    s = WaitFor(kids, absl::StrCat("saved ", step, ";"), 600, sample);
    run.seconds += SecondsSince(start);
    for (pid_t p : server_pids) cpu += CpuSecondsOf(p);
    run.server_cpu_s += cpu;
  }
  if (s.ok()) s = WaitFor(kids, "done", 60);
  for (Child& k : kids) {
    if (!s.ok()) ::kill(k.pid, SIGKILL);
    int status = 0;
    ::waitpid(k.pid, &status, 0);
    ::close(k.to);
    ::close(k.from);
    Collect(k.out, job, &run);
  }
  if (!s.ok()) return s;
  return run;
}

// The value below which `share` of `v` lie (nearest rank); 0 when empty.
double Quantile(std::vector<double> v, double share) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(share * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

uint64_t Max(const std::vector<uint64_t>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

struct Figures {
  double GBps = 0;
  double p50 = 0, p99 = 0, behind_p99 = 0;
  uint64_t late = 0;
};

Figures Summarize(const Run& r, const Job& job) {
  Figures f;
  f.GBps = Div(double(job.bytes) * job.ranks * job.steps, r.seconds) / 1e9;
  f.p50 = Quantile(r.durable, 0.5);
  f.p99 = Quantile(r.durable, 0.99);
  f.behind_p99 = Quantile(r.behind, 0.99);
  if (job.deadline_s > 0) {
    f.late = std::count_if(r.durable.begin(), r.durable.end(),
                           [&](double t) { return t > job.deadline_s; });
  }
  return f;
}

int Main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child") {
    return ChildMain(argc, argv);
  }
  Flags flags(
      "bench_scale",
      {{"ranks", {"256", "ranks of the storming job"}},
       {"procs", {"32", "client processes the ranks run in (a node each)"}},
       {"servers", {"2", "stagger-server processes"}},
       {"size", {"4MiB", "bytes of state per rank"}},
       {"steps", {"2", "full checkpoints per rank, each one a storm"}},
       {"deadline-s",
        {"0", "qos mode's deadline (0: 2 x a step's bytes at the ceiling)"}},
       {"ranks-out",
        {"", "write 'run rank seconds' per rank and step to this file"}},
       {"data", {"/tmp", "parent of the temporary data directories"}},
       {"server", {"", "stagger-server binary (default: next to this one)"}},
       {"json", {"", "write the figures as JSON to this file"}}});
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail("scale", s);
  if (flags.help()) {
    flags.PrintUsage();
    return 0;
  }
  auto ranks = flags.GetInt("ranks");
  auto procs = flags.GetInt("procs");
  auto nservers = flags.GetInt("servers");
  auto size = flags.GetSize("size");
  auto steps = flags.GetInt("steps");
  auto deadline = flags.GetSeconds("deadline-s");
  for (const Status& st : {ranks.status(), procs.status(), nservers.status(),
                           size.status(), steps.status(), deadline.status()}) {
    if (!st.ok()) return Fail("scale", st);
  }
  if (*ranks < 1 || *procs < 1 || *nservers < 1 || *steps < 1 || *size == 0 ||
      *deadline < 0) {
    return Fail("scale", absl::InvalidArgumentError(
                             "--ranks, --procs, --servers, --steps and --size "
                             "must be at least 1, --deadline-s at least 0"));
  }
  if (*ranks % *procs != 0) {
    return Fail("scale",
                absl::InvalidArgumentError(absl::StrCat(
                    "--ranks ", *ranks, " is not a multiple of --procs ",
                    *procs, " (every process runs as many ranks)")));
  }
  std::string server_bin = flags.Get("server");
  if (server_bin.empty()) server_bin = BinDir() + "/stagger-server";
  auto dir = TempDir::Make(flags.Get("data"), "stagger-bench-scale");
  if (!dir.ok()) return Fail("scale", dir.status());
  setenv("UCX_TLS", "sm,tcp", /*overwrite=*/0);

  const uint64_t step_bytes = *size * *ranks;
  printf(
      "bench_scale: %d ranks in %d processes x %s x %d steps to %d servers, "
      "fresh ones for each run, data under %s\n",
      *ranks, *procs, FormatBytes(*size).c_str(), *steps, *nservers,
      (*dir)->path().c_str());
  fflush(stdout);
  uint64_t idle_rss = 0;  // the servers' RSS before a run, the largest
  FILE* ranks_out = nullptr;
  if (!flags.Get("ranks-out").empty()) {
    ranks_out = fopen(flags.Get("ranks-out").c_str(), "w");
    if (ranks_out == nullptr) {
      return Fail("scale", absl::InvalidArgumentError(absl::StrCat(
                               "--ranks-out ", flags.Get("ranks-out"),
                               ": cannot be written")));
    }
  }

  Table table({"mode", "ranks", "procs", "GB/s", "x ceiling", "durable_p50_s",
               "durable_p99_s", "behind_p99_s", "late", "failed", "busy",
               "client_cpu_s", "server_cpu_s", "server_peak_rss"});
  auto row = [&](const std::string& mode, const Job& job, const Run& r,
                 const Figures& f, double ceiling) {
    table.AddRow({mode, std::to_string(job.ranks), std::to_string(job.procs),
                  Fixed(f.GBps, 3),
                  ceiling > 0 ? Fixed(f.GBps / ceiling, 2) : "",
                  Fixed(f.p50, 3), Fixed(f.p99, 3),
                  job.deadline_s > 0 ? Fixed(f.behind_p99, 3) : "",
                  job.deadline_s > 0 ? std::to_string(f.late) : "",
                  std::to_string(r.failed), std::to_string(r.busy),
                  Fixed(r.client_cpu_s, 2), Fixed(r.server_cpu_s, 2),
                  FormatBytes(Max(r.peak_rss))});
  };
  // Each run gets fresh servers on empty directories, removed afterwards:
  // no run sees another's data, and the disk holds one run at a time.
  auto run = [&](const std::string& name, uint64_t n, uint64_t nprocs,
                 double deadline_s) -> Result<std::pair<Job, Run>> {
    std::vector<std::unique_ptr<ServerProcess>> servers;
    std::vector<std::string> addrs;
    std::vector<pid_t> pids;
    for (int i = 0; i < *nservers; ++i) {
      const std::string data = absl::StrCat((*dir)->path(), "/", name, i);
      auto p = ServerProcess::Start(server_bin, data);
      if (!p.ok()) return p.status();
      addrs.push_back((*p)->grpc_address());
      pids.push_back((*p)->pid());
      idle_rss = std::max(idle_rss, RssBytes(pids.back()));
      servers.push_back(std::move(*p));
    }
    Job job{absl::StrJoin(addrs, ","),     name,      n, nprocs, step_bytes / n,
            static_cast<uint64_t>(*steps), deadline_s};
    auto r = RunJob(job, pids);
    servers.clear();
    for (int i = 0; i < *nservers; ++i) {
      std::error_code ec;
      std::filesystem::remove_all(absl::StrCat((*dir)->path(), "/", name, i),
                                  ec);
    }
    if (!r.ok()) return r.status();
    if (ranks_out != nullptr) {
      for (const auto& [rank, t] : r->ranks) {
        fprintf(ranks_out, "%s %lu %.6f\n", name.c_str(), rank, t);
      }
    }
    if (r->failed > 0) {
      fprintf(stderr, "bench_scale: %s: %lu save(s) failed, first: %s\n",
              name.c_str(), r->failed, r->first_failure.c_str());
    }
    return std::make_pair(job, *r);
  };

  // The ceiling: k big ranks per server, one process each.
  double ceiling = 0;
  for (int k : {1, 2, 4}) {
    const uint64_t n = static_cast<uint64_t>(k) * *nservers;
    auto r = run(absl::StrCat("ceiling-", k), n, n, 0);
    if (!r.ok()) return Fail("scale", r.status());
    Figures f = Summarize(r->second, r->first);
    ceiling = std::max(ceiling, f.GBps);
    row(absl::StrCat("ceiling ", k, "/server"), r->first, r->second, f, 0);
  }
  auto naive = run("storm-naive", *ranks, *procs, 0);
  if (!naive.ok()) return Fail("scale", naive.status());
  const Figures fn = Summarize(naive->second, naive->first);
  row("naive", naive->first, naive->second, fn, ceiling);
  const double window = *deadline > 0
                            ? *deadline
                            : std::max(1.0, 2 * step_bytes / (ceiling * 1e9));
  auto qos = run("storm-qos", *ranks, *procs, window);
  if (!qos.ok()) return Fail("scale", qos.status());
  const Figures fq = Summarize(qos->second, qos->first);
  row(absl::StrCat("qos W=", Fixed(window, 2), "s"), qos->first, qos->second,
      fq, ceiling);
  table.Print();
  printf("servers' RSS: %s before a run, peak %s (naive), %s (qos)\n",
         FormatBytes(idle_rss).c_str(),
         FormatBytes(Max(naive->second.peak_rss)).c_str(),
         FormatBytes(Max(qos->second.peak_rss)).c_str());

  if (ranks_out != nullptr) fclose(ranks_out);
  const double ratio = fn.GBps / ceiling;
  ResultLine result("scale");
  result.Add("ranks", *ranks);
  result.Add("procs", *procs);
  result.Add("servers", *nservers);
  result.Add("ceiling_GBps", ceiling);
  result.Add("naive_GBps", fn.GBps);
  result.Add("naive_p50_s", fn.p50);
  result.Add("naive_p99_s", fn.p99);
  result.Add("qos_window_s", window);
  result.Add("qos_GBps", fq.GBps);
  result.Add("qos_p50_s", fq.p50);
  result.Add("qos_p99_s", fq.p99);
  result.Add("qos_behind_p99_s", fq.behind_p99);
  result.Add("qos_late", fq.late);
  result.Add("failed", naive->second.failed + qos->second.failed);
  result.Add("naive_busy", naive->second.busy);
  result.Add("naive_client_cpu_s", naive->second.client_cpu_s);
  result.Add("naive_server_cpu_s", naive->second.server_cpu_s);
  result.Add("server_peak_rss_MiB",
             std::max(Max(naive->second.peak_rss), Max(qos->second.peak_rss)) /
                 1048576.0);
  result.Add("server_idle_rss_MiB", idle_rss / 1048576.0);
  result.Add("step_MiB", step_bytes / 1048576.0);
  JsonReport json;
  json.Set("name", std::string("scale"));
  for (const auto& [key, value] : result.figures()) json.Set(key, value);
  json.Set("ratio", ratio);
  s = json.Write(flags.Get("json"));
  if (!s.ok()) return Fail("scale", s);
  result.Print(ratio);
  return 0;
}

}  // namespace
}  // namespace stagger::bench

int main(int argc, char** argv) { return stagger::bench::Main(argc, argv); }
