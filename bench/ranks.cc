// bench_ranks: how the control plane grows with the number of ranks. For
// each rank count N of --ranks, a job of N ranks (--procs processes, N /
// procs Checkpointers each, default options) saves one step of one tiny
// row-sharded tensor (a row of --cols F32 per rank) to --servers fresh
// stagger-server processes, and the driver measures, in the same run:
//
//   listed      time from the last rank's commit (its save durable) to the
//               step being listed complete (Steps() polled every 20 ms)
//   save        release of every rank to the last one durable
//   steps, ls   latency of Steps() and of `stagger ls` (median of 5, 3)
//   reshard     a load of the step on world N/2 (rank 0: its 2 rows), and
//               what its planning read: time, manifests, bytes
//   server      the coordinator's RSS growth over the step, its RocksDB
//               directory's size, control-plane calls per rank
//               (stagger_server_control_calls_total, the driver's own
//               polls taken out)
//
// It prints one row per N and a RESULT line with each figure at the
// smallest and largest N and their ratio (the slope: a figure independent
// of N has ratio ~1, one linear in N has the ratio of the Ns). RESULT
// ratio = the reshard planning time at the largest N over the smallest.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/children.h"
#include "bench/common.h"
#include "bench/server_process.h"
#include "metrics/http_exporter.h"
#include "stagger/checkpointer.h"

namespace stagger::bench {
namespace {

// Element j of row r of the global tensor.
float Value(uint64_t r, uint64_t j) {
  return static_cast<float>(r) + static_cast<float>(j) / 1024.0f;
}

TensorSpec Rows(std::vector<float>& data, uint64_t first, uint64_t rows,
                uint64_t world, uint64_t cols) {
  data.resize(rows * cols);
  TensorSpec t{"w", "F32", {int64_t(rows), int64_t(cols)}, data.data()};
  t.global_shape = {int64_t(world), int64_t(cols)};
  t.global_offset = {int64_t(first), 0};
  return t;
}

// ---- The child: COUNT ranks from FIRST, of a job of WORLD. ----

// argv: --child SERVERS JOB FIRST COUNT WORLD COLS. Prints "ready", waits
// for a byte on stdin, saves step 1 on every rank, prints "committed T"
// (unix seconds when the last save was durable), then "done".
int ChildMain(int argc, char** argv) {
  if (argc != 8) return 2;
  uint64_t first = 0, count = 0, world = 0, cols = 0;
  if (!absl::SimpleAtoi(argv[4], &first) ||
      !absl::SimpleAtoi(argv[5], &count) ||
      !absl::SimpleAtoi(argv[6], &world) || !absl::SimpleAtoi(argv[7], &cols)) {
    return 2;
  }
  std::vector<std::unique_ptr<Checkpointer>> cks;
  std::vector<std::vector<float>> rows(count);
  for (uint64_t i = 0; i < count; ++i) {
    CheckpointerOptions o;
    o.servers = argv[2];
    o.job = argv[3];
    o.rank = static_cast<uint32_t>(first + i);
    o.world_size = static_cast<uint32_t>(world);
    auto ck = Checkpointer::Open(o);
    if (!ck.ok()) {
      printf("error %s\n", ck.status().ToString().c_str());
      return 1;
    }
    TensorSpec t = Rows(rows[i], first + i, 1, world, cols);
    for (uint64_t j = 0; j < cols; ++j) rows[i][j] = Value(first + i, j);
    Status s = (*ck)->Register(t);
    if (!s.ok()) {
      printf("error %s\n", s.ToString().c_str());
      return 1;
    }
    cks.push_back(std::move(*ck));
  }
  printf("ready\n");
  fflush(stdout);
  char go;
  if (::read(0, &go, 1) != 1) return 1;
  std::vector<SaveHandle> handles;
  for (auto& ck : cks) {
    auto h = ck->Save(1);
    if (!h.ok()) {
      printf("error %s\n", h.status().ToString().c_str());
      return 1;
    }
    handles.push_back(std::move(*h));
  }
  for (SaveHandle& h : handles) {
    Status s = h.Wait();
    if (!s.ok()) {
      printf("error %s\n", s.ToString().c_str());
      return 1;
    }
  }
  printf("committed %.6f\ndone\n", absl::ToUnixMicros(absl::Now()) / 1e6);
  fflush(stdout);
  return 0;
}

// ---- The parent. ----

// The sum over methods of stagger_server_control_calls_total on a page.
std::map<std::string, double> ControlCalls(const std::string& metrics) {
  std::map<std::string, double> calls;
  auto page = metrics::HttpGet(metrics, "/metrics");
  if (!page.ok()) return calls;
  const std::string prefix = "stagger_server_control_calls_total{method=\"";
  for (absl::string_view line : absl::StrSplit(*page, '\n')) {
    if (line.substr(0, prefix.size()) != prefix) continue;
    line.remove_prefix(prefix.size());
    const size_t quote = line.find('"');
    const size_t space = line.rfind(' ');
    double v = 0;
    if (quote == absl::string_view::npos || space == absl::string_view::npos ||
        !absl::SimpleAtod(line.substr(space + 1), &v)) {
      continue;
    }
    calls[std::string(line.substr(0, quote))] += v;
  }
  return calls;
}

// The value of the unlabelled sample `name` on a metrics page (0 when
// absent).
double Sample(const std::string& metrics, const std::string& name) {
  auto page = metrics::HttpGet(metrics, "/metrics");
  if (!page.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*page, '\n')) {
    double v = 0;
    if (absl::StartsWith(line, name + " ") &&
        absl::SimpleAtod(line.substr(name.size() + 1), &v)) {
      return v;
    }
  }
  return 0;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) n += it->file_size(ec);
  }
  return n;
}

struct Figures {
  double save_s = 0, listed_s = 0, steps_ms = 0, ls_ms = 0;
  double load_ms = 0, plan_ms = 0, plan_first_ms = 0, manifest_KiB = 0;
  uint32_t manifests = 0;
  double rss_MiB = 0, rss_KiB_per_rank = 0, rocksdb_KiB = 0;
  double heap_KiB_per_rank = 0;  // the coordinator's heap held afterwards
  double calls_per_rank = 0, commits_per_rank = 0;
  bool bit_exact = false;
};

Result<Figures> RunOne(uint64_t n, int procs, int nservers, uint64_t cols,
                       const std::string& server_bin,
                       const std::string& parent) {
  STAGGER_ASSIGN_OR_RETURN(auto dir, TempDir::Make(parent, "stagger-ranks"));
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addrs;
  for (int i = 0; i < nservers; ++i) {
    STAGGER_ASSIGN_OR_RETURN(
        auto p, ServerProcess::Start(server_bin,
                                     absl::StrCat(dir->path(), "/server", i),
                                     30, {"--metrics-listen", "127.0.0.1:0"}));
    addrs.push_back(p->grpc_address());
    servers.push_back(std::move(p));
  }
  const std::string list = absl::StrJoin(addrs, ",");
  const std::string job = "ranks";
  // The observer: rank 0 of a world of n/2, two rows.
  CheckpointerOptions o;
  o.servers = list;
  o.job = job;
  o.world_size = static_cast<uint32_t>(std::max<uint64_t>(1, n / 2));
  STAGGER_ASSIGN_OR_RETURN(auto observer, Checkpointer::Open(o));
  std::vector<float> mine;
  const uint64_t my_rows = n >= 2 ? 2 : 1;
  STAGGER_RETURN_IF_ERROR(observer->Register(Rows(mine, 0, my_rows, n, cols)));

  std::vector<Child> kids;
  const uint64_t per = (n + procs - 1) / procs;
  for (uint64_t first = 0; first < n; first += per) {
    STAGGER_ASSIGN_OR_RETURN(
        Child k,
        SpawnChild({"bench_ranks", "--child", list, job, std::to_string(first),
                    std::to_string(std::min(per, n - first)), std::to_string(n),
                    std::to_string(cols)}));
    kids.push_back(k);
  }
  auto reap = [&kids](bool kill) {
    for (Child& k : kids) {
      if (kill) ::kill(k.pid, SIGKILL);
      int status = 0;
      ::waitpid(k.pid, &status, 0);
      ::close(k.to);
      ::close(k.from);
    }
  };
  Status s = WaitFor(kids, "ready", 900);
  if (!s.ok()) {
    reap(true);
    return s;
  }
  const uint64_t rss_before = RssBytes(servers[0]->pid());
  const double heap_before =
      Sample(servers[0]->metrics_address(), "stagger_heap_in_use_bytes");
  uint64_t rss_peak = rss_before;
  std::map<std::string, double> calls_before;
  for (auto& p : servers) {
    for (auto& [m, v] : ControlCalls(p->metrics_address())) {
      calls_before[m] += v;
    }
  }
  // Polls for the complete step from the release on.
  std::atomic<bool> stop{false};
  std::atomic<double> seen{0};
  std::atomic<int> polls{0};
  const auto start = Clock::now();
  std::thread poller([&] {
    while (!stop.load()) {
      auto steps = observer->Steps(false);
      ++polls;
      if (steps.ok() && !steps->empty() && (*steps)[0].complete) {
        seen = absl::ToUnixMicros(absl::Now()) / 1e6;
        return;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  for (Child& k : kids) (void)!::write(k.to, "g", 1);
  s = WaitFor(kids, "done", 1800, [&] {
    rss_peak = std::max(rss_peak, RssBytes(servers[0]->pid()));
  });
  Figures f;
  f.save_s = SecondsSince(start);
  if (!s.ok()) {
    stop = true;
    poller.join();
    reap(true);
    return s;
  }
  double last_commit = 0;
  for (const Child& k : kids) {
    const size_t at = k.out.find("committed ");
    if (at != std::string::npos) {
      last_commit = std::max(last_commit, std::atof(k.out.c_str() + at + 10));
    }
  }
  reap(false);
  poller.join();
  f.listed_s = std::max(0.0, seen.load() - last_commit);
  rss_peak = std::max(rss_peak, RssBytes(servers[0]->pid()));

  std::map<std::string, double> calls_after;
  for (auto& p : servers) {
    for (auto& [m, v] : ControlCalls(p->metrics_address())) {
      calls_after[m] += v;
    }
  }
  double calls = 0;
  for (auto& [m, v] : calls_after) calls += v - calls_before[m];
  // The observer's polls: a ListSteps on every server each.
  calls -= static_cast<double>(polls.load()) * nservers;
  f.calls_per_rank = calls / static_cast<double>(n);
  f.commits_per_rank =
      (calls_after["CommitShard"] - calls_before["CommitShard"]) / n;

  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto a = Clock::now();
    auto steps = observer->Steps(false);
    if (!steps.ok()) return steps.status();
    t.push_back(SecondsSince(a) * 1e3);
  }
  f.steps_ms = Median(t);
  t.clear();
  const std::string ls =
      absl::StrCat(BinDir(), "/stagger --server ", list, " ls", " --job ", job,
                   " > /dev/null 2>&1");
  for (int i = 0; i < 3; ++i) {
    const auto a = Clock::now();
    if (std::system(ls.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("failed: ", ls));
    }
    t.push_back(SecondsSince(a) * 1e3);
  }
  f.ls_ms = Median(t);

  // Twice: the first load of a step may build the coordinator's index of
  // its slices; the second is what every other loading rank sees.
  uint64_t manifest_bytes = 0;
  for (int i = 0; i < 2; ++i) {
    std::fill(mine.begin(), mine.end(), -1.0f);
    const auto a = Clock::now();
    STAGGER_RETURN_IF_ERROR(observer->Load(1).status());
    f.load_ms = SecondsSince(a) * 1e3;
    const ClientMetrics m = observer->Metrics();
    (i == 0 ? f.plan_first_ms : f.plan_ms) = m.last_load_plan_s * 1e3;
    f.manifests = m.last_load_manifests;
    f.manifest_KiB = (m.load_manifest_bytes - manifest_bytes) / 1024.0;
    manifest_bytes = m.load_manifest_bytes;
  }
  f.bit_exact = true;
  for (uint64_t r = 0; r < my_rows; ++r) {
    for (uint64_t j = 0; j < cols; ++j) {
      f.bit_exact = f.bit_exact && mine[r * cols + j] == Value(r, j);
    }
  }
  f.rss_MiB = (static_cast<double>(rss_peak) - rss_before) / 1048576.0;
  f.rss_KiB_per_rank = f.rss_MiB * 1024.0 / static_cast<double>(n);
  f.rocksdb_KiB = DirBytes(dir->path() + "/server0/meta") / 1024.0;
  // Held once the ranks are gone and the step was loaded (its slice index
  // built): what the step costs the coordinator for as long as it is kept.
  f.heap_KiB_per_rank =
      (Sample(servers[0]->metrics_address(), "stagger_heap_in_use_bytes") -
       heap_before) /
      1024.0 / static_cast<double>(n);
  observer.reset();
  servers.clear();
  return f;
}

int Main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child") {
    return ChildMain(argc, argv);
  }
  Flags flags("bench_ranks",
              {{"ranks", {"256,1024", "rank counts, comma-separated"}},
               {"procs", {"8", "client processes the ranks are spread over"}},
               {"servers", {"1", "stagger-server processes"}},
               {"cols", {"64", "F32 elements per rank (one row)"}},
               {"data", {"/tmp", "parent of the temporary data directories"}},
               {"server",
                {"",
                 "stagger-server binary (default: next to "
                 "this one)"}},
               {"json", {"", "write the figures as JSON to this file"}}});
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail("ranks", s);
  if (flags.help()) {
    flags.PrintUsage();
    return 0;
  }
  std::vector<uint64_t> ns;
  for (absl::string_view part : absl::StrSplit(flags.Get("ranks"), ',')) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > (1u << 20)) {
      return Fail("ranks", absl::InvalidArgumentError(absl::StrCat(
                               "--ranks: '", part,
                               "' is not a rank count from 1 to 1048576")));
    }
    ns.push_back(n);
  }
  auto procs = flags.GetInt("procs");
  auto nservers = flags.GetInt("servers");
  auto cols = flags.GetInt("cols");
  if (!procs.ok()) return Fail("ranks", procs.status());
  if (!nservers.ok()) return Fail("ranks", nservers.status());
  if (!cols.ok()) return Fail("ranks", cols.status());
  if (*procs < 1 || *nservers < 1 || *cols < 1) {
    return Fail("ranks", absl::InvalidArgumentError(
                             "--procs, --servers and --cols must be at least "
                             "1"));
  }
  std::string server_bin = flags.Get("server");
  if (server_bin.empty()) server_bin = BinDir() + "/stagger-server";
  setenv("UCX_TLS", "sm,tcp", /*overwrite=*/0);
  printf(
      "bench_ranks: ranks %s in %d processes, %d server(s), %d F32 per "
      "rank\n",
      flags.Get("ranks").c_str(), *procs, *nservers, *cols);
  fflush(stdout);

  Table table({"ranks", "save_s", "listed_s", "steps_ms", "ls_ms",
               "reshard_load_ms", "plan_first_ms", "plan_ms", "manifests",
               "manifest_KiB", "coord_rss_MiB", "KiB/rank", "heap_KiB/rank",
               "rocksdb_KiB", "calls/rank", "commits/rank"});
  std::vector<Figures> all;
  JsonReport json;
  for (uint64_t n : ns) {
    auto f =
        RunOne(n, static_cast<int>(std::min<uint64_t>(*procs, n)), *nservers,
               static_cast<uint64_t>(*cols), server_bin, flags.Get("data"));
    if (!f.ok())
      return Fail("ranks", WithContext(f.status(), absl::StrCat(n, " ranks")));
    if (!f->bit_exact) {
      return Fail("ranks", absl::DataLossError(
                               absl::StrCat("the reshard load of ", n,
                                            " ranks' step came back wrong")));
    }
    table.AddRow({std::to_string(n), Fixed(f->save_s, 3), Fixed(f->listed_s, 3),
                  Fixed(f->steps_ms, 1), Fixed(f->ls_ms, 1),
                  Fixed(f->load_ms, 1), Fixed(f->plan_first_ms, 1),
                  Fixed(f->plan_ms, 1), std::to_string(f->manifests),
                  Fixed(f->manifest_KiB, 1), Fixed(f->rss_MiB, 1),
                  Fixed(f->rss_KiB_per_rank, 2), Fixed(f->heap_KiB_per_rank, 2),
                  Fixed(f->rocksdb_KiB, 0), Fixed(f->calls_per_rank, 2),
                  Fixed(f->commits_per_rank, 2)});
    json.AddRow({{"ranks", std::to_string(n)},
                 {"save_s", Fixed(f->save_s, 4)},
                 {"listed_s", Fixed(f->listed_s, 4)},
                 {"steps_ms", Fixed(f->steps_ms, 2)},
                 {"ls_ms", Fixed(f->ls_ms, 2)},
                 {"plan_ms", Fixed(f->plan_ms, 2)},
                 {"plan_first_ms", Fixed(f->plan_first_ms, 2)},
                 {"manifest_KiB", Fixed(f->manifest_KiB, 1)},
                 {"rss_KiB_per_rank", Fixed(f->rss_KiB_per_rank, 3)},
                 {"heap_KiB_per_rank", Fixed(f->heap_KiB_per_rank, 3)},
                 {"calls_per_rank", Fixed(f->calls_per_rank, 3)}});
    all.push_back(*f);
  }
  table.Print();
  const Figures& lo = all.front();
  const Figures& hi = all.back();
  auto slope = [](double a, double b) { return a > 0 ? b / a : 0.0; };
  ResultLine result("ranks");
  result.Add("ranks_lo", static_cast<double>(ns.front()));
  result.Add("ranks_hi", static_cast<double>(ns.back()));
  result.Add("listed_s_hi", hi.listed_s);
  result.Add("steps_ms_hi", hi.steps_ms);
  result.Add("ls_ms_hi", hi.ls_ms);
  result.Add("plan_ms_lo", lo.plan_ms);
  result.Add("plan_ms_hi", hi.plan_ms);
  result.Add("plan_first_ms_hi", hi.plan_first_ms);
  result.Add("manifest_KiB_x", slope(lo.manifest_KiB, hi.manifest_KiB));
  result.Add("steps_x", slope(lo.steps_ms, hi.steps_ms));
  result.Add("save_x", slope(lo.save_s, hi.save_s));
  result.Add("rss_KiB_per_rank_hi", hi.rss_KiB_per_rank);
  result.Add("heap_KiB_per_rank_hi", hi.heap_KiB_per_rank);
  result.Add("calls_per_rank_hi", hi.calls_per_rank);
  const double ratio = slope(lo.plan_ms, hi.plan_ms);
  json.Set("name", std::string("ranks"));
  for (const auto& [key, value] : result.figures()) json.Set(key, value);
  json.Set("ratio", ratio);
  s = json.Write(flags.Get("json"));
  if (!s.ok()) return Fail("ranks", s);
  result.Print(ratio);
  return 0;
}

}  // namespace
}  // namespace stagger::bench

int main(int argc, char** argv) { return stagger::bench::Main(argc, argv); }
