// bench_recovery: how fast is state back after a trainer dies?
//
// One stagger-server process (next to this binary) with a memory tier
// (--memory-bytes), one trainer (this process), --size of realistic state
// (codec raw: bytes moved = bytes stored). Measured in one run:
//   link        the UCX link ceiling, in a child process per transport:
//               shared memory (UCX_TLS=sm,tcp, the trainer's own node) and
//               tcp loopback (UCX_TLS=tcp, standing in for a peer node)
//   disk read   sequential O_DIRECT read ceiling of the data directory
//   save disk   Save() to complete with durability "disk" (job A)
//   save memory Save() to complete with durability "memory" (job B), then
//               to disk-level (Checkpointer::WaitDisk), untimed for the save
//   recovery    a new process (this binary, --child) per case: spawn to
//               exit, and inside it Open + Register + Load(latest) (the
//               state's buffers are allocated before the clock starts; the
//               bit-exact check after it stops):
//                 disk     job A, read from the server's segments (O_DIRECT:
//                          cold, the page cache does not serve them)
//                 memory   job B, read from the server's RAM, over shared
//                          memory (a trainer process restarted on its node)
//                 memory over tcp: the same over tcp loopback (a
//                          replacement trainer on another node)
// GB = 1e9 bytes of raw state.
// RESULT ratio = memory restore (shared memory) speed-up over disk restore.
// Targets (docs/benchmarks.md): restore from memory >= 3x faster than from disk
// and >= 0.8x the link; durability "memory" saves complete >= 2x faster
// than "disk".
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/ceilings.h"
#include "bench/common.h"
#include "bench/server_process.h"
#include "client/cli/synthetic_state.h"
#include "stagger/checkpointer.h"

extern char** environ;

namespace stagger::bench {
namespace {

constexpr char kDiskJob[] = "bench-recovery-disk";
constexpr char kMemoryJob[] = "bench-recovery-memory";

std::string GB(double gbps) { return Fixed(gbps, 3); }

Result<std::unique_ptr<Checkpointer>> Open(const std::string& servers,
                                           const std::string& job,
                                           Durability durability) {
  CheckpointerOptions o;
  o.servers = servers;
  o.job = job;
  o.codec = CodecChoice::kRaw;
  o.durability = durability;
  return Checkpointer::Open(o);
}

// Saves `state` as `step` of `job` with a new Checkpointer (no history:
// every chunk is sent); returns Save() to complete, seconds, and sets
// `*disk_level_s` to Save() to disk-level.
Result<double> SaveOnce(const std::string& servers, const std::string& job,
                        Durability durability, client::SyntheticState& state,
                        int64_t step, double* disk_level_s) {
  STAGGER_ASSIGN_OR_RETURN(auto ck, Open(servers, job, durability));
  STAGGER_RETURN_IF_ERROR(RegisterState(state, *ck));
  STAGGER_RETURN_IF_ERROR(ck->PrepareStaging());
  const auto start = Clock::now();
  STAGGER_ASSIGN_OR_RETURN(SaveHandle h, ck->Save(step));
  STAGGER_RETURN_IF_ERROR(h.Wait());
  const double complete_s = SecondsSince(start);
  STAGGER_RETURN_IF_ERROR(ck->WaitDisk(absl::Minutes(10)));
  *disk_level_s = SecondsSince(start);
  return complete_s;
}

// What a child process printed: "KEY value" lines.
struct ChildRun {
  double wall_s = 0;        // spawn to exit
  uint64_t spawned_ns = 0;  // steady clock (CLOCK_MONOTONIC) at spawn
  std::map<std::string, std::string> values;
};

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Clock::now().time_since_epoch())
      .count();
}

// Runs this binary with `args` and UCX_TLS=`tls`; its stdout's "KEY value"
// lines come back. UNAVAILABLE (with its output) when it fails.
Result<ChildRun> RunChild(std::vector<std::string> args,
                          const std::string& tls) {
  args.insert(args.begin(), BinDir() + "/bench_recovery");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text = {"UCX_TLS=" + tls};
  for (char** e = environ; *e != nullptr; ++e) {
    if (strncmp(*e, "UCX_TLS=", 8) != 0) env_text.push_back(*e);
  }
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) return absl::UnavailableError("pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  const auto start = Clock::now();
  const uint64_t spawned_ns = NowNs();
  pid_t pid;
  const int rc =
      posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return absl::UnavailableError(
        absl::StrCat("cannot run ", argv[0], ": ", strerror(rc)));
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ChildRun run;
  run.wall_s = SecondsSince(start);
  run.spawned_ns = spawned_ns;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(
        absl::StrCat(args[1], " ", args[2], " child failed: ", text));
  }
  std::istringstream lines(text);
  std::string key, value;
  while (lines >> key >> value) run.values[key] = value;
  return run;
}

// The child: the UCX link ceiling, or a restarted trainer's load.
int ChildMain(const Flags& flags, uint64_t size, uint64_t seed, int steps) {
  if (flags.Get("child") == "link") {
    auto link = MeasureUcxLoopback(size);
    if (!link.ok()) return Fail("recovery", link.status());
    printf("link_GBps %.6f\n", link->GBps());
    return 0;
  }
  // The state the trainer's model has (to check the load against: not
  // part of the recovery); its buffers, zeroed and touched.
  const auto gen_start = Clock::now();
  client::SyntheticState state(size, seed);
  for (int i = 0; i < steps; ++i) state.Step();
  std::vector<std::vector<char>> bufs;
  for (const auto& t : state.tensors()) bufs.emplace_back(t.bytes.size(), 0);
  const double gen_s = SecondsSince(gen_start);
  const auto start = Clock::now();
  auto ck = Open(flags.Get("servers"), flags.Get("child"), Durability::kDisk);
  if (!ck.ok()) return Fail("recovery", ck.status());
  for (size_t i = 0; i < bufs.size(); ++i) {
    const auto& t = state.tensors()[i];
    Status s = (*ck)->Register({t.name, t.dtype, t.shape, bufs[i].data()});
    if (!s.ok()) return Fail("recovery", s);
  }
  const double open_s = SecondsSince(start);
  auto step = (*ck)->Load(kLatestStep);
  if (!step.ok()) return Fail("recovery", step.status());
  const double total_s = SecondsSince(start);
  const uint64_t loaded_ns = NowNs();
  bool exact = true;
  for (size_t i = 0; i < bufs.size(); ++i) {
    exact = exact && memcmp(bufs[i].data(), state.tensors()[i].bytes.data(),
                            bufs[i].size()) == 0;
  }
  printf(
      "open_s %.6f\nload_s %.6f\ntotal_s %.6f\nexact %d\ngen_s %.6f\n"
      "loaded_ns %llu\n",
      open_s, total_s - open_s, total_s, exact ? 1 : 0, gen_s,
      static_cast<unsigned long long>(loaded_ns));
  return 0;
}

double Value(const ChildRun& run, const std::string& key) {
  auto it = run.values.find(key);
  return it == run.values.end() ? 0 : atof(it->second.c_str());
}

int Main(int argc, char** argv) {
  Flags flags(
      "bench_recovery",
      {{"size", {"512MiB", "bytes of realistic state"}},
       {"iterations", {"3", "saves and loads per path (medians)"}},
       {"data", {"/tmp", "parent of the temporary data directory"}},
       {"json", {"", "write the figures here as JSON"}},
       {"server", {"", "stagger-server binary (default: next to this one)"}},
       {"seed", {"1", "SyntheticState seed"}},
       {"write-behind-delay-ms", {"0", "the server's --write-behind-delay-ms"}},
       {"child", {"", "internal: link, or the job to load"}},
       {"servers", {"", "internal: the server list for --child"}},
       {"steps", {"1", "internal: the step loaded (training steps)"}}});
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail("recovery", s);
  if (flags.help()) {
    flags.PrintUsage();
    return 0;
  }
  auto size = flags.GetSize("size");
  auto seed = flags.GetInt("seed");
  auto iterations = flags.GetInt("iterations");
  auto steps = flags.GetInt("steps");
  for (const Status& st :
       {size.status(), seed.status(), iterations.status(), steps.status()}) {
    if (!st.ok()) return Fail("recovery", st);
  }
  if (*iterations < 1) {
    return Fail("recovery",
                absl::InvalidArgumentError("--iterations must be at least 1"));
  }
  if (!flags.Get("child").empty()) {
    return ChildMain(flags, *size, static_cast<uint64_t>(*seed), *steps);
  }
  setenv("UCX_TLS", "sm,tcp", 0);
  std::string server_bin = flags.Get("server");
  if (server_bin.empty()) server_bin = BinDir() + "/stagger-server";
  auto dir = TempDir::Make(flags.Get("data"), "stagger-bench-recovery");
  if (!dir.ok()) return Fail("recovery", dir.status());
  client::SyntheticState state(*size, static_cast<uint64_t>(*seed));
  const uint64_t total = state.total_bytes();
  printf(
      "bench_recovery: %s of realistic state in %zu tensors, one server "
      "with a memory tier, %d timed iteration(s), data directory %s\n",
      FormatBytes(total).c_str(), state.tensors().size(), *iterations,
      (*dir)->path().c_str());
  fflush(stdout);

  const std::string size_text = std::to_string(total);
  auto link_sm = RunChild({"--child", "link", "--size", size_text}, "sm,tcp");
  if (!link_sm.ok()) return Fail("recovery", link_sm.status());
  auto link_tcp = RunChild({"--child", "link", "--size", size_text}, "tcp");
  if (!link_tcp.ok()) return Fail("recovery", link_tcp.status());
  auto disk = MeasureDiskRead((*dir)->path(), total);
  if (!disk.ok()) return Fail("recovery", disk.status());

  auto server = ServerProcess::Start(
      server_bin, (*dir)->path() + "/server", 30,
      {"--memory-bytes", std::to_string(total + (64 << 20)), "--domain",
       "node0", "--write-behind-delay-ms", flags.Get("write-behind-delay-ms")});
  if (!server.ok()) return Fail("recovery", server.status());
  const std::string servers = (*server)->grpc_address();
  // Step 0 of both jobs first, untimed: the first saves fault in the
  // server's buffers (for the memory tier, RAM the size of the state),
  // which a trainer pays once per server. Then each iteration saves a new
  // step of both jobs (the state trained one step further), which comes
  // first alternating.
  double first_disk = 0, first_memory = 0;
  std::vector<double> save_disk, save_memory, disk_level;
  for (int i = 0; i <= *iterations; ++i) {
    if (i > 0) state.Step();
    for (int k = 0; k < 2; ++k) {
      const bool memory = (k == 0) == (i % 2 == 1);
      double level_s = 0;
      auto t = SaveOnce(servers, memory ? kMemoryJob : kDiskJob,
                        memory ? Durability::kMemory : Durability::kDisk, state,
                        i, &level_s);
      if (!t.ok()) return Fail("recovery", t.status());
      if (i == 0) {
        (memory ? first_memory : first_disk) = *t;
        continue;
      }
      (memory ? save_memory : save_disk).push_back(*t);
      if (memory) disk_level.push_back(level_s);
    }
  }

  // Loads of the newest step, each by a new process; in turn, medians.
  const std::vector<std::string> child_args = {
      "--servers", servers,
      "--size",    std::to_string(*size),
      "--seed",    std::to_string(*seed),
      "--steps",   std::to_string(*iterations)};
  struct Path {
    const char* job;
    const char* tls;
    std::vector<double> load_s, recovery_s;
    bool exact = true;
  };
  Path paths[3] = {
      {kDiskJob, "sm,tcp"}, {kMemoryJob, "sm,tcp"}, {kMemoryJob, "tcp"}};
  for (int i = 0; i < *iterations; ++i) {
    for (Path& p : paths) {
      std::vector<std::string> args = {"--child", p.job};
      args.insert(args.end(), child_args.begin(), child_args.end());
      auto run = RunChild(args, p.tls);
      if (!run.ok()) return Fail("recovery", run.status());
      p.load_s.push_back(Value(*run, "load_s"));
      // Spawn to state back, less the child's making of the reference.
      p.recovery_s.push_back(
          (Value(*run, "loaded_ns") - static_cast<double>(run->spawned_ns)) /
              1e9 -
          Value(*run, "gen_s"));
      p.exact = p.exact && Value(*run, "exact") == 1;
    }
  }
  server->reset();

  const double sm_gbps = Value(*link_sm, "link_GBps");
  const double tcp_gbps = Value(*link_tcp, "link_GBps");
  auto gbps = [&](double sec) { return Div(total, sec) / 1e9; };
  const double disk_save = Median(save_disk);
  const double memory_save = Median(save_memory);
  const double level_s = Median(disk_level);
  const double disk_load = Median(paths[0].load_s);
  const double mem_load = Median(paths[1].load_s);
  const double peer_load = Median(paths[2].load_s);
  const double disk_rec = Median(paths[0].recovery_s);
  const double mem_rec = Median(paths[1].recovery_s);
  const double peer_rec = Median(paths[2].recovery_s);
  const bool exact = paths[0].exact && paths[1].exact && paths[2].exact;

  Table table({"what", "seconds", "GB/s", "x_link", "x_disk_path"});
  table.AddRow(
      {"link: UCX shared memory (sm,tcp)", "-", GB(sm_gbps), "1.00", "-"});
  table.AddRow({"link: UCX tcp loopback", "-", GB(tcp_gbps), "1.00", "-"});
  table.AddRow({disk->direct ? "disk read ceiling (O_DIRECT)"
                             : "disk read ceiling (buffered)",
                Fixed(disk->seconds, 4), GB(disk->GBps()), "-", "-"});
  table.AddRow({"first saves (warm-up): disk", Fixed(first_disk, 4),
                GB(gbps(first_disk)), "-", "-"});
  table.AddRow({"first saves (warm-up): memory", Fixed(first_memory, 4),
                GB(gbps(first_memory)), "-", "-"});
  table.AddRow({"save, durability disk: Save() to complete",
                Fixed(disk_save, 4), GB(gbps(disk_save)),
                Ratio(gbps(disk_save), sm_gbps), "1.00"});
  table.AddRow({"save, durability memory: Save() to complete",
                Fixed(memory_save, 4), GB(gbps(memory_save)),
                Ratio(gbps(memory_save), sm_gbps),
                Ratio(disk_save, memory_save)});
  table.AddRow({"  ... and to disk-level", Fixed(level_s, 4), GB(gbps(level_s)),
                "-", Ratio(disk_save, level_s)});
  table.AddRow({"load from disk (cold), new process", Fixed(disk_load, 4),
                GB(gbps(disk_load)), Ratio(gbps(disk_load), sm_gbps), "1.00"});
  table.AddRow({"load from memory, same node (sm)", Fixed(mem_load, 4),
                GB(gbps(mem_load)), Ratio(gbps(mem_load), sm_gbps),
                Ratio(disk_load, mem_load)});
  table.AddRow({"load from memory, peer node (tcp)", Fixed(peer_load, 4),
                GB(gbps(peer_load)), Ratio(gbps(peer_load), tcp_gbps),
                Ratio(disk_load, peer_load)});
  table.AddRow({"recovery, disk: process start to state back",
                Fixed(disk_rec, 4), "-", "-", "1.00"});
  table.AddRow({"recovery, memory same node", Fixed(mem_rec, 4), "-", "-",
                Ratio(disk_rec, mem_rec)});
  table.AddRow({"recovery, memory peer node (tcp)", Fixed(peer_rec, 4), "-",
                "-", Ratio(disk_rec, peer_rec)});
  table.Print();
  printf(
      "medians of %d; x_link: GB/s over the link ceiling of the transport "
      "used; x_disk_path: seconds of the disk row over this row's; loads "
      "are bit-exact: %s\n",
      *iterations, exact ? "yes" : "NO");

  ResultLine result("recovery");
  result.Add("save_memory_x_disk", Div(disk_save, memory_save));
  result.Add("first_save_memory_x_disk", Div(first_disk, first_memory));
  // The first memory save into an empty tier over a later one (1: no
  // warm-up cost).
  result.Add("first_memory_x_later", Div(first_memory, memory_save));
  result.Add("save_memory_x_link", Div(gbps(memory_save), sm_gbps));
  result.Add("load_memory_x_link", Div(gbps(mem_load), sm_gbps));
  result.Add("load_peer_x_link", Div(gbps(peer_load), tcp_gbps));
  result.Add("load_peer_x_disk", Div(disk_load, peer_load));
  result.Add("recovery_memory_s", mem_rec);
  result.Add("recovery_peer_s", peer_rec);
  result.Add("recovery_disk_s", disk_rec);
  result.Add("bit_exact", exact ? 1 : 0);
  JsonReport json;
  for (const auto& [k, v] : result.figures()) json.Set(k, v);
  json.Set("load_memory_x_disk", Div(disk_load, mem_load));
  if (Status w = json.Write(flags.Get("json")); !w.ok()) {
    return Fail("recovery", w);
  }
  result.Print(Div(disk_load, mem_load));
  return exact ? 0 : 1;
}

}  // namespace
}  // namespace stagger::bench

int main(int argc, char** argv) { return stagger::bench::Main(argc, argv); }
