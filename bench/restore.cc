// bench_restore: how fast is the newest checkpoint back in memory, on the
// same layout and resharded (4 -> 3 ranks)?
//
// Measured in the same run, for the same byte count (--size of realistic
// state):
//   disk read  sequential read ceiling of the data directory's disk: a file
//              of the same size written first (untimed), then read with
//              io_uring, 4 MiB reads, queue depth 8 (as the write ceiling),
//              O_DIRECT (buffered after dropping its cached pages when the
//              filesystem refuses O_DIRECT)
//   save       a stagger-server process (next to this binary) on a temporary
//              data directory; --ranks (4) in-process Checkpointers each
//              register a row slice of every tensor (TensorSpec global_shape
//              and global_offset) and save step 1 (--codec, default raw, so
//              the bytes read equal the bytes on disk). Untimed.
//   same       --ranks fresh Checkpointers (world --ranks), each with its
//              own buffers for its row slices, Load(latest) concurrently
//              (one thread each): time from the first Load() call to the
//              last return. Open, Register and the buffers' first touch are
//              outside the timed region, and so is the bit-exact check
//              against the saved state.
//   reshard    the same with --reshard-ranks (3) ranks holding row slices
//              of the same global tensors.
// Each load is a median of --iterations, same and reshard alternating. The
// server reads segments with O_DIRECT unless the filesystem refused it (its
// log then says so, and so does the output), so neither side is served by
// the page cache. GB = 1e9 bytes of raw state.
// RESULT ratio = same-layout GB/s / read ceiling GB/s. Targets
// (docs/benchmarks.md): ratio >= 0.85; reshard_x_same (time) <= 1.2.
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/ceilings.h"
#include "bench/common.h"
#include "bench/server_process.h"
#include "client/cli/synthetic_state.h"
#include "stagger/checkpointer.h"

namespace stagger::bench {
namespace {

constexpr char kJob[] = "bench-restore";
constexpr char kFill = 0x55;  // buffers start as this, not as the state

// Rows [offset, offset + rows) of a tensor: part `p` of `parts`, the first
// n % parts parts one row longer.
struct Rows {
  int64_t offset = 0;
  int64_t rows = 0;
};

Rows Split(int64_t n, int64_t parts, int64_t p) {
  int64_t base = n / parts, rem = n % parts;
  return {p * base + std::min(p, rem), base + (p < rem ? 1 : 0)};
}

uint64_t RowBytes(const client::SyntheticTensor& t) {
  return t.bytes.size() / static_cast<uint64_t>(t.shape[0]);
}

// Rows `r` of `t` as a slice of the global tensor, its memory at `data`.
TensorSpec SliceSpec(const client::SyntheticTensor& t, Rows r, void* data) {
  TensorSpec spec{t.name, t.dtype, t.shape, data};
  spec.shape[0] = r.rows;
  spec.global_shape = t.shape;
  spec.global_offset.assign(t.shape.size(), 0);
  spec.global_offset[0] = r.offset;
  return spec;
}

Result<std::unique_ptr<Checkpointer>> OpenRank(const std::string& servers,
                                               const std::string& codec,
                                               uint32_t rank, uint32_t world) {
  CheckpointerOptions o;
  o.servers = servers;
  o.job = kJob;
  o.rank = rank;
  o.world_size = world;
  auto parsed = ParseCodecChoice(codec);
  if (!parsed.ok()) return WithContext(parsed.status(), "--codec");
  o.codec = *parsed;
  auto ck = Checkpointer::Open(o);
  if (!ck.ok()) {
    return WithContext(ck.status(),
                       absl::StrCat("open rank ", rank, " of ", world));
  }
  return ck;
}

// Saves the state as step 1 with `world` ranks, each registering its row
// slice of every tensor in place, and waits until every rank committed.
// Returns the step's stored bytes.
Result<uint64_t> SaveStep(const std::string& servers, const std::string& codec,
                          uint32_t world, client::SyntheticState& state) {
  std::vector<std::unique_ptr<Checkpointer>> cks;
  for (uint32_t r = 0; r < world; ++r) {
    auto ck = OpenRank(servers, codec, r, world);
    if (!ck.ok()) return ck.status();
    for (client::SyntheticTensor& t : state.tensors()) {
      Rows rows = Split(t.shape[0], world, r);
      if (rows.rows == 0) continue;
      char* data = t.bytes.data() + rows.offset * RowBytes(t);
      STAGGER_RETURN_IF_ERROR((*ck)->Register(SliceSpec(t, rows, data)));
    }
    cks.push_back(std::move(*ck));
  }
  std::vector<SaveHandle> handles;
  for (uint32_t r = 0; r < world; ++r) {
    auto h = cks[r]->Save(1);
    if (!h.ok()) return WithContext(h.status(), absl::StrCat("Save rank ", r));
    handles.push_back(*h);
  }
  for (uint32_t r = 0; r < world; ++r) {
    STAGGER_RETURN_IF_ERROR_CTX(handles[r].Wait(), "durable rank ", r);
  }
  auto steps = cks[0]->Steps(false);
  if (!steps.ok()) return WithContext(steps.status(), "Steps");
  if (steps->size() != 1 || (*steps)[0].step != 1) {
    return absl::InternalError("step 1 is not the one complete step");
  }
  return (*steps)[0].stored_bytes;
}

struct LoadRun {
  uint32_t world = 0;
  double seconds = 0;  // first Load() call to the last return
  uint64_t bytes = 0;  // raw bytes loaded, all ranks together
  bool exact = false;  // every byte equals the saved state
};

// Loads the latest step on `world` fresh ranks at once, each into its own
// buffers for its row slices, then checks every byte against `state`.
Result<LoadRun> LoadOnce(const std::string& servers, const std::string& codec,
                         uint32_t world, client::SyntheticState& state) {
  const std::vector<client::SyntheticTensor>& tensors = state.tensors();
  std::vector<std::unique_ptr<Checkpointer>> cks;
  // out[rank][tensor]: that rank's rows of the tensor, touched up front.
  std::vector<std::vector<std::vector<char>>> out(world);
  LoadRun run;
  run.world = world;
  for (uint32_t r = 0; r < world; ++r) {
    auto ck = OpenRank(servers, codec, r, world);
    if (!ck.ok()) return ck.status();
    out[r].resize(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      Rows rows = Split(tensors[i].shape[0], world, r);
      if (rows.rows == 0) continue;
      out[r][i].assign(rows.rows * RowBytes(tensors[i]), kFill);
      run.bytes += out[r][i].size();
      STAGGER_RETURN_IF_ERROR(
          (*ck)->Register(SliceSpec(tensors[i], rows, out[r][i].data())));
    }
    cks.push_back(std::move(*ck));
  }

  std::vector<Result<int64_t>> loaded(world, int64_t{0});
  std::vector<std::thread> threads;
  auto start = Clock::now();
  for (uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { loaded[r] = cks[r]->Load(kLatestStep); });
  }
  for (std::thread& t : threads) t.join();
  run.seconds = SecondsSince(start);

  for (uint32_t r = 0; r < world; ++r) {
    if (!loaded[r].ok()) {
      return WithContext(loaded[r].status(),
                         absl::StrCat("Load rank ", r, " of ", world));
    }
    if (*loaded[r] != 1) {
      return absl::InternalError(
          absl::StrCat("rank ", r, " loaded step ", *loaded[r], ", not 1"));
    }
  }
  run.exact = true;
  for (uint32_t r = 0; r < world; ++r) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      Rows rows = Split(tensors[i].shape[0], world, r);
      const char* want =
          tensors[i].bytes.data() + rows.offset * RowBytes(tensors[i]);
      if (memcmp(out[r][i].data(), want, out[r][i].size()) != 0) {
        fprintf(stderr, "bench_restore: rank %u of %u: '%s' differs\n", r,
                world, tensors[i].name.c_str());
        run.exact = false;
      }
    }
  }
  return run;
}

// False when the server's log says it fell back to buffered segment I/O.
bool ServerUsedDirectIo(const std::string& log_path) {
  std::ifstream f(log_path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str().find("O_DIRECT") == std::string::npos;
}

std::string GB(double gbps) { return Fixed(gbps, 3); }

int Main(int argc, char** argv) {
  Flags flags("bench_restore",
              {{"size", {"1GiB", "bytes of model state"}},
               {"json", {"", "write the figures as JSON to this file"}},
               {"data",
                {"/tmp",
                 "parent of the temporary data directory "
                 "(its disk is the one measured)"}},
               {"iterations", {"3", "loads per layout (median)"}},
               {"codec",
                {"raw",
                 "codec of the save (raw: bytes read = bytes on "
                 "disk)"}},
               {"ranks", {"4", "ranks that save, and load the same layout"}},
               {"reshard-ranks", {"3", "ranks that load resharded"}},
               {"server",
                {"",
                 "stagger-server binary (default: next to "
                 "this one, or $STAGGER_BIN_DIR)"}},
               {"seed", {"1", "SyntheticState seed"}}});
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail("restore", s);
  if (flags.help()) {
    flags.PrintUsage();
    return 0;
  }
  auto size = flags.GetSize("size");
  auto iterations = flags.GetInt("iterations");
  auto ranks = flags.GetInt("ranks");
  auto reshard_ranks = flags.GetInt("reshard-ranks");
  auto seed = flags.GetInt("seed");
  for (const Status& st : {size.status(), iterations.status(), ranks.status(),
                           reshard_ranks.status(), seed.status()}) {
    if (!st.ok()) return Fail("restore", st);
  }
  if (*iterations < 1 || *ranks < 1 || *reshard_ranks < 1) {
    return Fail("restore", absl::InvalidArgumentError(
                               "--iterations, --ranks and --reshard-ranks "
                               "must be at least 1"));
  }
  const std::string codec = flags.Get("codec");
  std::string server_bin = flags.Get("server");
  if (server_bin.empty()) server_bin = BinDir() + "/stagger-server";
  auto dir = TempDir::Make(flags.Get("data"), "stagger-bench-restore");
  if (!dir.ok()) return Fail("restore", dir.status());

  client::SyntheticState state(*size, static_cast<uint64_t>(*seed));
  const uint64_t total = state.total_bytes();
  printf(
      "bench_restore: %s of realistic state in %zu tensors, saved by %d "
      "ranks (row slices), codec %s, data directory %s\n",
      FormatBytes(total).c_str(), state.tensors().size(), *ranks, codec.c_str(),
      (*dir)->path().c_str());
  fflush(stdout);

  auto disk = MeasureDiskRead((*dir)->path(), total);
  if (!disk.ok()) return Fail("restore", disk.status());

  const std::string server_dir = (*dir)->path() + "/server";
  auto server = ServerProcess::Start(server_bin, server_dir);
  if (!server.ok()) return Fail("restore", server.status());
  const std::string servers = (*server)->grpc_address();
  auto stored = SaveStep(servers, codec, *ranks, state);
  if (!stored.ok()) return Fail("restore", stored.status());

  std::vector<LoadRun> same, reshard;
  for (int i = 0; i < *iterations; ++i) {
    auto a = LoadOnce(servers, codec, *ranks, state);
    if (!a.ok()) return Fail("restore", a.status());
    same.push_back(*a);
    auto b = LoadOnce(servers, codec, *reshard_ranks, state);
    if (!b.ok()) return Fail("restore", b.status());
    reshard.push_back(*b);
  }
  server->reset();
  const bool server_direct = ServerUsedDirectIo(server_dir + ".server.log");

  if (!disk->direct) {
    printf(
        "note: the filesystem refused O_DIRECT; the read ceiling is buffered "
        "reads after dropping the file's cached pages\n");
  }
  printf(
      "server segment I/O: %s; stored %s for %s raw; median of %d loads "
      "per layout, fresh Checkpointers each; GB = 1e9 bytes\n",
      server_direct ? "O_DIRECT (page cache bypassed)"
                    : "buffered (O_DIRECT refused; the page cache may serve "
                      "reads)",
      FormatBytes(*stored).c_str(), FormatBytes(total).c_str(), *iterations);

  auto median_s = [](const std::vector<LoadRun>& runs) {
    std::vector<double> v;
    for (const LoadRun& r : runs) v.push_back(r.seconds);
    return Median(v);
  };
  auto all_exact = [](const std::vector<LoadRun>& runs) {
    for (const LoadRun& r : runs) {
      if (!r.exact) return false;
    }
    return true;
  };
  const double same_s = median_s(same);
  const double reshard_s = median_s(reshard);
  const double same_gbps = Div(total, same_s) / 1e9;
  const double reshard_gbps = Div(total, reshard_s) / 1e9;
  const double read_gbps = disk->GBps();

  Table table({"path", "seconds", "GB/s", "x_ceiling", "bytes", "bit_exact"});
  table.AddRow({disk->direct ? "disk read (io_uring O_DIRECT, 4MiB x8)"
                             : "disk read (io_uring buffered, 4MiB x8)",
                Fixed(disk->seconds, 4), GB(read_gbps), "1.00",
                FormatBytes(disk->bytes), "-"});
  table.AddRow(
      {absl::StrCat("same layout (", *ranks, " -> ", *ranks, " ranks)"),
       Fixed(same_s, 4), GB(same_gbps), Ratio(same_gbps, read_gbps),
       FormatBytes(same[0].bytes), all_exact(same) ? "yes" : "NO"});
  table.AddRow(
      {absl::StrCat("resharded (", *ranks, " -> ", *reshard_ranks, " ranks)"),
       Fixed(reshard_s, 4), GB(reshard_gbps), Ratio(reshard_gbps, read_gbps),
       FormatBytes(reshard[0].bytes), all_exact(reshard) ? "yes" : "NO"});
  table.Print();
  if (!all_exact(same) || !all_exact(reshard)) {
    return Fail("restore",
                absl::DataLossError("a load did not return the saved bytes"));
  }

  const double ratio = Div(same_gbps, read_gbps);
  ResultLine result("restore");
  result.Add("read_GBps", read_gbps);
  result.Add("same_GBps", same_gbps);
  result.Add("reshard_GBps", reshard_gbps);
  result.Add("same_ratio", ratio);
  result.Add("reshard_x_same", Div(reshard_s, same_s));

  JsonReport json;
  json.Set("name", std::string("restore"));
  json.Set("size_bytes", static_cast<double>(total));
  json.Set("stored_bytes", static_cast<double>(*stored));
  json.Set("codec", codec);
  json.Set("ranks", *ranks);
  json.Set("reshard_ranks", *reshard_ranks);
  json.Set("iterations", *iterations);
  json.SetBool("disk_direct", disk->direct);
  json.SetBool("server_direct", server_direct);
  for (const auto& [key, value] : result.figures()) json.Set(key, value);
  json.Set("ratio", ratio);
  for (const std::vector<LoadRun>* runs : {&same, &reshard}) {
    for (const LoadRun& r : *runs) {
      json.AddRow({{"layout", runs == &same ? "same" : "reshard"},
                   {"ranks", std::to_string(r.world)},
                   {"seconds", Fixed(r.seconds, 6)},
                   {"bytes", std::to_string(r.bytes)},
                   {"bit_exact", r.exact ? "true" : "false"}});
    }
  }
  s = json.Write(flags.Get("json"));
  if (!s.ok()) return Fail("restore", s);
  result.Print(ratio);
  return 0;
}

}  // namespace
}  // namespace stagger::bench

int main(int argc, char** argv) { return stagger::bench::Main(argc, argv); }
