// bench_scale: does stagger hold up with many ranks? --clients client
// processes (ranks of one job) save --steps full checkpoints of --size
// bytes each, at once, to --servers stagger-server processes on loopback.
//
// Measured in the same run:
//   one client   one process alone (a job of one rank) saving the same
//                per-rank size for the same steps: the per-client rate
//   all clients  every rank released at the same instant; aggregate rate =
//                all bytes of all steps / time from release to the last
//                rank's last durable step
//   server RSS   each server's resident memory, sampled every 100 ms while
//                the clients run: its peak, against its RSS before the run
//                (bounded by the ingest budget, whatever the state size)
// Every step writes new bytes (each rank refills its state), so every save
// is a full checkpoint. RESULT ratio = aggregate / one client's rate (how
// much more the servers take in with many clients than with one).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/children.h"
#include "bench/common.h"
#include "bench/server_process.h"
#include "stagger/checkpointer.h"

namespace stagger::bench {
namespace {

// ---- The child: one rank. ----

// argv: --child SERVERS JOB RANK WORLD BYTES STEPS. Prints "ready", waits
// for one byte on stdin, then per step "step N durable_s X", then "done".
int ChildMain(int argc, char** argv) {
  if (argc != 8) return 2;
  CheckpointerOptions o;
  o.servers = argv[2];
  o.job = argv[3];
  uint64_t rank = 0, world = 0, bytes = 0, steps = 0;
  if (!absl::SimpleAtoi(argv[4], &rank) || !absl::SimpleAtoi(argv[5], &world) ||
      !absl::SimpleAtoi(argv[6], &bytes) ||
      !absl::SimpleAtoi(argv[7], &steps)) {
    return 2;
  }
  o.rank = static_cast<uint32_t>(rank);
  o.world_size = static_cast<uint32_t>(world);
  o.codec =
      CodecChoice::kRaw;  // the servers and the fabric are measured, not zstd
  o.staging_bytes = (bytes + o.chunk_size - 1) / o.chunk_size * o.chunk_size;
  auto ck = Checkpointer::Open(o);
  if (!ck.ok()) {
    printf("error %s\n", ck.status().ToString().c_str());
    return 1;
  }
  std::vector<uint64_t> state((bytes + 7) / 8);
  Status s = (*ck)->Register({"state", "U8", {int64_t(bytes)}, state.data()});
  if (!s.ok()) {
    printf("error %s\n", s.ToString().c_str());
    return 1;
  }
  std::mt19937_64 rng(rank * 7919 + 1);
  printf("ready\n");
  fflush(stdout);
  char go;
  if (::read(0, &go, 1) != 1) return 1;
  for (uint64_t step = 1; step <= steps; ++step) {
    for (uint64_t& x : state) x = rng();  // all new: a full checkpoint
    auto h = (*ck)->Save(static_cast<int64_t>(step));
    Status w = h.ok() ? h->Wait() : h.status();
    if (!w.ok()) {
      printf("error %s\n", w.ToString().c_str());
      return 1;
    }
    printf("step %llu durable_s %.6f\n", static_cast<unsigned long long>(step),
           h->stats().durable_s);
    fflush(stdout);
  }
  printf("done\n");
  fflush(stdout);
  return 0;
}

// ---- The parent. ----

struct Run {
  double seconds = 0;  // release to the last rank's last step
  std::vector<double> durable;
};

// Runs `clients` ranks of job `job`; samples the servers' RSS meanwhile.
Result<Run> RunJob(const std::string& servers, const std::string& job,
                   int clients, uint64_t bytes, int steps,
                   const std::vector<pid_t>& server_pids,
                   std::vector<uint64_t>* peak_rss) {
  std::vector<Child> kids;
  for (int r = 0; r < clients; ++r) {
    auto k = SpawnChild({"bench_scale", "--child", servers, job,
                         std::to_string(r), std::to_string(clients),
                         std::to_string(bytes), std::to_string(steps)});
    if (!k.ok()) return k.status();
    kids.push_back(*k);
  }
  auto sample = [&] {
    for (size_t i = 0; i < server_pids.size(); ++i) {
      (*peak_rss)[i] = std::max((*peak_rss)[i], RssBytes(server_pids[i]));
    }
  };
  Status s = WaitFor(kids, "ready", 120);
  Run run;
  if (s.ok()) {
    const auto start = Clock::now();
    for (Child& k : kids) (void)!::write(k.to, "g", 1);
    s = WaitFor(kids, "done", 600, sample);
    run.seconds = SecondsSince(start);
  }
  for (Child& k : kids) {
    if (!s.ok()) ::kill(k.pid, SIGKILL);
    int status = 0;
    ::waitpid(k.pid, &status, 0);
    ::close(k.to);
    ::close(k.from);
    size_t at = 0;
    while ((at = k.out.find("durable_s ", at)) != std::string::npos) {
      at += 10;
      run.durable.push_back(std::atof(k.out.c_str() + at));
    }
  }
  if (!s.ok()) return s;
  return run;
}

int Main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child") {
    return ChildMain(argc, argv);
  }
  Flags flags(
      "bench_scale",
      {{"clients", {"32", "client processes (ranks of one job)"}},
       {"servers", {"2", "stagger-server processes"}},
       {"size", {"16MiB", "bytes of state per client"}},
       {"steps", {"3", "full checkpoints per client"}},
       {"data", {"/tmp", "parent of the temporary data directories"}},
       {"server", {"", "stagger-server binary (default: next to this one)"}},
       {"json", {"", "write the figures as JSON to this file"}}});
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail("scale", s);
  if (flags.help()) {
    flags.PrintUsage();
    return 0;
  }
  auto clients = flags.GetInt("clients");
  auto nservers = flags.GetInt("servers");
  auto size = flags.GetSize("size");
  auto steps = flags.GetInt("steps");
  if (!clients.ok()) return Fail("scale", clients.status());
  if (!nservers.ok()) return Fail("scale", nservers.status());
  if (!size.ok()) return Fail("scale", size.status());
  if (!steps.ok()) return Fail("scale", steps.status());
  if (*clients < 1 || *nservers < 1 || *steps < 1 || *size == 0) {
    return Fail("scale", absl::InvalidArgumentError(
                             "--clients, --servers, --steps and --size must "
                             "be at least 1"));
  }
  std::string server_bin = flags.Get("server");
  if (server_bin.empty()) server_bin = BinDir() + "/stagger-server";
  auto dir = TempDir::Make(flags.Get("data"), "stagger-bench-scale");
  if (!dir.ok()) return Fail("scale", dir.status());
  setenv("UCX_TLS", "sm,tcp", /*overwrite=*/0);

  std::vector<std::unique_ptr<ServerProcess>> procs;
  std::vector<std::string> addrs;
  std::vector<pid_t> pids;
  for (int i = 0; i < *nservers; ++i) {
    auto p = ServerProcess::Start(server_bin,
                                  absl::StrCat((*dir)->path(), "/server", i));
    if (!p.ok()) return Fail("scale", p.status());
    addrs.push_back((*p)->grpc_address());
    pids.push_back((*p)->pid());
    procs.push_back(std::move(*p));
  }
  const std::string servers = absl::StrJoin(addrs, ",");
  std::vector<uint64_t> idle_rss;
  for (pid_t p : pids) idle_rss.push_back(RssBytes(p));
  printf(
      "bench_scale: %d clients x %s x %d steps to %d servers (%s), data "
      "under %s\n",
      *clients, FormatBytes(*size).c_str(), *steps, *nservers, servers.c_str(),
      (*dir)->path().c_str());
  fflush(stdout);

  std::vector<uint64_t> ignored(pids.size(), 0);
  auto one = RunJob(servers, "scale-one", 1, *size, *steps, pids, &ignored);
  if (!one.ok()) return Fail("scale", one.status());
  std::vector<uint64_t> peak(pids.size(), 0);
  auto all = RunJob(servers, "scale-all", *clients, *size, *steps, pids, &peak);
  if (!all.ok()) return Fail("scale", all.status());

  const double one_bytes = static_cast<double>(*size) * *steps;
  const double all_bytes = one_bytes * *clients;
  const double one_GBps = one_bytes / one->seconds / 1e9;
  const double all_GBps = all_bytes / all->seconds / 1e9;
  Table table({"run", "clients", "bytes", "seconds", "GB/s", "durable_p50_s",
               "durable_max_s"});
  auto row = [&](const char* name, int n, double bytes, const Run& r,
                 double gbps) {
    table.AddRow(
        {name, std::to_string(n), FormatBytes(static_cast<uint64_t>(bytes)),
         Fixed(r.seconds, 3), Fixed(gbps, 3), Fixed(Median(r.durable), 3),
         Fixed(r.durable.empty()
                   ? 0
                   : *std::max_element(r.durable.begin(), r.durable.end()),
               3)});
  };
  row("one client", 1, one_bytes, *one, one_GBps);
  row("all clients", *clients, all_bytes, *all, all_GBps);
  table.Print();
  uint64_t peak_max = 0, idle_max = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    printf("server %zu: RSS %s before, peak %s while %s were saved\n", i,
           FormatBytes(idle_rss[i]).c_str(), FormatBytes(peak[i]).c_str(),
           FormatBytes(static_cast<uint64_t>(all_bytes)).c_str());
    peak_max = std::max(peak_max, peak[i]);
    idle_max = std::max(idle_max, idle_rss[i]);
  }
  procs.clear();

  const double ratio = all_GBps / one_GBps;
  ResultLine result("scale");
  result.Add("clients", *clients);
  result.Add("servers", *nservers);
  result.Add("one_GBps", one_GBps);
  result.Add("all_GBps", all_GBps);
  result.Add("server_peak_rss_MiB", peak_max / 1048576.0);
  result.Add("server_idle_rss_MiB", idle_max / 1048576.0);
  result.Add("saved_MiB", all_bytes / 1048576.0);
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
