// bench_stall: how long does Save() block the training loop?
//
// One rank saves --size bytes of realistic state (SyntheticState) to an
// embedded server in a temporary directory. Measured in the same run:
//   floor     memcpy of the same bytes into preallocated, pre-faulted
//             memory (best of 3): no snapshot can stall less
//   Save()    time until Save() returns (the eager stall), median of
//             --iterations saves, each waited to durable before the next
//   lazy      Save(lazy) return + BeforeUpdate() return, with a simulated
//             forward/backward (a sleep of 2x the floor) in between: the
//             stall the training loop sees when the copy overlaps compute
//   first     the first Save() of a fresh Checkpointer with default
//             options, --first-after-s after Register() (its staging is
//             prepared in the background meanwhile), and a second
//             Checkpointer's first save, lazy, right after its Register()
//             while the first is open (its pool made on the way)
//   torch     torch.save of tensors of the same shapes and dtypes to a file
//             in the same directory (peer; skipped without torch)
// RESULT ratio = Save() stall / floor; lazy_ratio = visible lazy stall /
// floor. Targets (docs/benchmarks.md): ratio <= 1.2, lazy_ratio <= 0.05;
// first_x_floor <= 2, first_lazy_ratio <= 0.05, lazy Save() calls <= 10 ms.
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/common.h"
#include "client/checkpointer_impl.h"
#include "client/cli/synthetic_state.h"
#include "stagger/checkpointer.h"

namespace stagger::bench {
namespace {

struct SaveRun {
  std::vector<double> returned_s;  // Save() call to return
  std::vector<double> visible_s;   // lazy: return + BeforeUpdate()
  std::vector<SaveStats> stats;
};

// Best of three single-threaded copies of every tensor into one
// preallocated buffer, faulted in before the first copy.
double MeasureFloor(client::SyntheticState& state) {
  uint64_t total = state.total_bytes();
  std::unique_ptr<char[]> dst(new char[total]);
  std::memset(dst.get(), 1, total);
  std::vector<double> runs;
  for (int i = 0; i < 3; ++i) {
    auto start = Clock::now();
    char* out = dst.get();
    for (auto& t : state.tensors()) {
      std::memcpy(out, t.bytes.data(), t.bytes.size());
      out += t.bytes.size();
    }
    runs.push_back(SecondsSince(start));
  }
  // Keep the copies from being optimised away.
  volatile char sink = dst[total - 1];
  (void)sink;
  return Min(runs);
}

Status RunSaves(Checkpointer& ck, client::SyntheticState& state, int iterations,
                bool lazy, double compute_s, int64_t* step, SaveRun* run) {
  for (int i = 0; i < iterations; ++i) {
    state.Step();
    SaveOptions opts;
    opts.lazy = lazy;
    auto start = Clock::now();
    auto h = ck.Save(++*step, opts);
    double returned = SecondsSince(start);
    if (!h.ok()) return WithContext(h.status(), "Save");
    double visible = returned;
    if (lazy) {
      // The forward/backward pass the copies overlap with; it leaves the
      // CPU free, as a GPU-bound step would.
      std::this_thread::sleep_for(std::chrono::duration<double>(compute_s));
      auto before = Clock::now();
      STAGGER_RETURN_IF_ERROR(WithContext(ck.BeforeUpdate(), "BeforeUpdate"));
      visible += SecondsSince(before);
    }
    STAGGER_RETURN_IF_ERROR(WithContext(h->Wait(), "waiting for durable"));
    run->returned_s.push_back(returned);
    run->visible_s.push_back(visible);
    run->stats.push_back(h->stats());
  }
  return absl::OkStatus();
}

// Runs bench/peers/torch_save.py on the same shapes. Returns the median
// torch.save time in seconds, or a negative value when torch is missing or
// the script fails (the reason is printed).
double RunTorchPeer(client::SyntheticState& state, const std::string& dir,
                    int iterations) {
  if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    printf("torch not installed: peer skipped\n");
    return -1;
  }
  const char* env = getenv("STAGGER_BENCH_PEERS_DIR");
  std::string script =
      std::string(env != nullptr ? env : STAGGER_BENCH_PEERS_DIR) +
      "/torch_save.py";
  std::string manifest = dir + "/torch_manifest.txt";
  {
    std::ofstream m(manifest);
    for (auto& t : state.tensors()) {
      m << t.name << " " << t.dtype;
      for (int64_t d : t.shape) m << " " << d;
      m << "\n";
    }
  }
  std::string cmd = "/usr/bin/python3 '" + script + "' --manifest '" +
                    manifest + "' --dir '" + dir + "' --iterations " +
                    std::to_string(iterations) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  double seconds = -1;
  char line[512];
  while (fgets(line, sizeof(line), p) != nullptr) {
    const char* key = "RESULT_PEER torch_save_s=";
    if (strncmp(line, key, strlen(key)) == 0) {
      seconds = atof(line + strlen(key));
    } else {
      printf("torch peer: %s", line);
    }
  }
  if (pclose(p) != 0 || seconds < 0) {
    printf("torch peer failed: peer skipped\n");
    return -1;
  }
  return seconds;
}

std::vector<std::string> Row(const std::string& mode, const SaveRun& r,
                             bool lazy, double floor) {
  std::vector<double> snap, durable;
  bool limited = false;
  for (const SaveStats& s : r.stats) {
    snap.push_back(s.snapshot_s);
    durable.push_back(s.durable_s);
    limited |= s.staging_limited;
  }
  const auto& v = lazy ? r.visible_s : r.returned_s;
  return {mode,
          Fixed(Median(v), 4),
          Fixed(Min(v), 4),
          Fixed(Median(v) / floor, 2),
          lazy ? Fixed(Median(r.returned_s), 4) : "-",
          Fixed(Median(snap), 4),
          Fixed(Median(durable), 4),
          limited ? "yes" : "no"};
}

int Main(int argc, char** argv) {
  Flags flags("bench_stall",
              {{"size", {"2GiB", "bytes of model state"}},
               {"json", {"", "write the figures as JSON to this file"}},
               {"data", {"/tmp", "parent of the temporary data directory"}},
               {"iterations", {"3", "measured saves per mode (median)"}},
               {"pipeline-threads",
                {"0", "CheckpointerOptions.pipeline_threads (0: auto)"}},
               {"snapshot-overlap",
                {std::string(NameOf(CheckpointerOptions().snapshot_overlap)),
                 "CheckpointerOptions.snapshot_overlap (auto, on, off)"}},
               {"seed", {"1", "SyntheticState seed"}},
               {"first-after-s",
                {"1",
                 "seconds of training between Register() and the "
                 "first save (the client prepares its staging "
                 "meanwhile)"}}});
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail("stall", s);
  if (flags.help()) {
    flags.PrintUsage();
    return 0;
  }
  auto size = flags.GetSize("size");
  auto iterations = flags.GetInt("iterations");
  auto seed = flags.GetInt("seed");
  if (!size.ok()) return Fail("stall", size.status());
  if (!iterations.ok()) return Fail("stall", iterations.status());
  if (!seed.ok()) return Fail("stall", seed.status());
  auto first_after = flags.GetSeconds("first-after-s");
  if (!first_after.ok()) return Fail("stall", first_after.status());
  const double first_after_s = *first_after;
  auto overlap = ParseSnapshotOverlap(flags.Get("snapshot-overlap"));
  if (!overlap.ok()) {
    return Fail("stall", WithContext(overlap.status(), "--snapshot-overlap"));
  }
  auto dir = TempDir::Make(flags.Get("data"), "stagger-bench-stall");
  if (!dir.ok()) return Fail("stall", dir.status());

  client::SyntheticState state(*size, static_cast<uint64_t>(*seed));
  const uint64_t total = state.total_bytes();
  printf(
      "bench_stall: %s of realistic state in %zu tensors, 1 rank, "
      "embedded server in %s\n",
      FormatBytes(total).c_str(), state.tensors().size(),
      (*dir)->path().c_str());
  const double floor = MeasureFloor(state);

  // Default options, as a user has them: the staging pool is sized and
  // faulted by the client itself (the first save shows what that costs).
  CheckpointerOptions o;
  o.servers = "embedded:" + (*dir)->path() + "/data";
  o.job = "bench-stall";
  o.pipeline_threads = atoi(flags.Get("pipeline-threads").c_str());
  o.snapshot_overlap = *overlap;
  auto ck = Checkpointer::Open(o);
  if (!ck.ok()) return Fail("stall", ck.status());
  s = RegisterState(state, **ck);
  if (!s.ok()) return Fail("stall", s);

  int64_t step = 0;
  SaveRun warmup, eager, lazy;
  // Training runs a while before its first checkpoint; the first save
  // then finds what the client set up meanwhile.
  std::this_thread::sleep_for(std::chrono::duration<double>(first_after_s));
  const uint64_t prepared = (*ck)->Metrics().staging_pool_bytes;
  s = RunSaves(**ck, state, 1, false, 0, &step, &warmup);
  if (s.ok()) s = RunSaves(**ck, state, *iterations, false, 0, &step, &eager);
  if (s.ok()) {
    s = RunSaves(**ck, state, *iterations, true, 2 * floor, &step, &lazy);
  }
  if (!s.ok())
    return Fail("stall", WithContext(s, "step " + std::to_string(step)));
  // A second Checkpointer beside the first (a second job, or DCP's
  // comparison in one process): its first save is lazy, and the first
  // one's pool is still in use.
  SaveRun second;
  {
    CheckpointerOptions o2 = o;
    o2.job = "bench-stall-2";
    auto ck2 = Checkpointer::Open(o2);
    if (!ck2.ok()) return Fail("stall", ck2.status());
    s = RegisterState(state, **ck2);
    int64_t step2 = 0;
    if (s.ok()) s = RunSaves(**ck2, state, 1, true, 2 * floor, &step2, &second);
    if (!s.ok()) return Fail("stall", WithContext(s, "second Checkpointer"));
  }
  ck->reset();
  double torch_s = RunTorchPeer(state, (*dir)->path(), *iterations);

  const uint64_t pool_bytes =
      eager.stats.empty() ? 0 : eager.stats.back().staging_pool_bytes;
  printf(
      "%d measured saves per mode after the first save; default staging "
      "(%s, %s of it ready %.1f s after Register()); lazy compute %.4f s\n",
      *iterations, FormatBytes(pool_bytes).c_str(),
      FormatBytes(prepared).c_str(), first_after_s, 2 * floor);
  Table table({"mode", "stall_s", "min_s", "x_floor", "return_s", "snapshot_s",
               "durable_s", "staging_ltd"});
  table.AddRow({"memcpy floor", Fixed(floor, 4), Fixed(floor, 4), "1.00", "-",
                "-", "-", "-"});
  table.AddRow(Row("first Save()", warmup, false, floor));
  table.AddRow(Row("Save()", eager, false, floor));
  table.AddRow(Row("2nd ckpt: first lazy", second, true, floor));
  table.AddRow(Row("Save(lazy)+BeforeUpdate", lazy, true, floor));
  if (torch_s >= 0) {
    table.AddRow({"torch.save (peer)", Fixed(torch_s, 4), "-",
                  Fixed(torch_s / floor, 2), "-", "-", "-", "-"});
  }
  table.Print();

  const double stall = Median(eager.returned_s);
  const double visible = Median(lazy.visible_s);
  ResultLine result("stall");
  result.Add("floor_s", floor);
  result.Add("stall_s", stall);
  result.Add("lazy_visible_s", visible);
  if (torch_s >= 0) {
    result.Add("torch_save_s", torch_s);
    result.Add("torch_ratio", torch_s / stall);
  }
  result.Add("lazy_ratio", visible / floor);
  // The first save of a fresh Checkpointer, eager; a second
  // Checkpointer's first save, lazy; and what a lazy Save() call costs.
  result.Add("first_x_floor", warmup.returned_s[0] / floor);
  result.Add("first_lazy_ratio", second.visible_s[0] / floor);
  result.Add("first_lazy_call_s", second.returned_s[0]);
  result.Add("lazy_call_s", Median(lazy.returned_s));

  JsonReport json;
  json.Set("name", std::string("stall"));
  json.Set("size_bytes", static_cast<double>(total));
  json.Set("iterations", *iterations);
  json.Set("staging_bytes", static_cast<double>(pool_bytes));
  for (const auto& [key, value] : result.figures()) json.Set(key, value);
  json.Set("ratio", stall / floor);
  json.SetBool("staging_limited",
               !eager.stats.empty() && eager.stats.back().staging_limited);
  for (const auto* run : {&eager, &lazy}) {
    for (size_t i = 0; i < run->stats.size(); ++i) {
      const SaveStats& st = run->stats[i];
      json.AddRow({{"mode", run == &eager ? "eager" : "lazy"},
                   {"return_s", Fixed(run->returned_s[i], 6)},
                   {"visible_s", Fixed(run->visible_s[i], 6)},
                   {"stall_s", Fixed(st.stall_s, 6)},
                   {"snapshot_s", Fixed(st.snapshot_s, 6)},
                   {"durable_s", Fixed(st.durable_s, 6)},
                   {"bytes_raw", std::to_string(st.bytes_raw)},
                   {"bytes_shipped", std::to_string(st.bytes_shipped)},
                   {"staging_bytes", std::to_string(st.staging_bytes)},
                   {"staging_limited", st.staging_limited ? "yes" : "no"}});
    }
  }
  s = json.Write(flags.Get("json"));
  if (!s.ok()) return Fail("stall", s);
  result.Print(stall / floor);
  return 0;
}

}  // namespace
}  // namespace stagger::bench

int main(int argc, char** argv) { return stagger::bench::Main(argc, argv); }
