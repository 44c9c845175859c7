// What incremental saves and gc cost on the server's disk, measured as
// `du` would (allocated blocks of the server's --data directory), with a
// real stagger-server process and a Checkpointer on default options.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "stagger/checkpointer.h"
#include "tests/testutil/process.h"

namespace stagger {
namespace {

namespace fs = std::filesystem;
using testutil::RunProcess;
using testutil::RunResult;
using testutil::ServerProcess;
using testutil::TempDir;

// Bytes allocated to the files under `dir` (st_blocks), as du counts them:
// reserved but unwritten space included.
uint64_t DiskBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec)) {
    struct stat st;
    if (e.is_regular_file(ec) && ::stat(e.path().c_str(), &st) == 0) {
      n += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return n;
}

// DiskBytes(dir) once it has not changed for a second (at most 60 s).
uint64_t SettledDiskBytes(const std::string& dir) {
  uint64_t last = DiskBytes(dir);
  int still = 0;
  for (int i = 0; i < 600 && still < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const uint64_t now = DiskBytes(dir);
    still = now == last ? still + 1 : 0;
    last = now;
  }
  return last;
}

std::unique_ptr<Checkpointer> Open(const std::string& server,
                                   const std::string& job) {
  CheckpointerOptions o;  // defaults: the policy a user gets
  o.servers = server;
  o.job = job;
  auto ck = Checkpointer::Open(o);
  EXPECT_TRUE(ck.ok()) << ck.status();
  return ck.ok() ? std::move(*ck) : nullptr;
}

TEST(DiskUsageTest, ASparseUpdateGrowsTheDiskByAboutTheChangedBytes) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  auto server = ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  auto ck = Open((*server)->grpc(), "sparse");
  ASSERT_NE(ck, nullptr);
  // An embedding of 32768 rows of 64 fp32 (8 MiB); 2% of rows change per
  // step, as in a recommender's sparse update.
  constexpr int64_t kRows = 32768, kDim = 64;
  std::vector<float> emb(kRows * kDim);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.05f);
  for (float& x : emb) x = d(rng);
  ASSERT_TRUE(ck->Register({"emb", "F32", {kRows, kDim}, emb.data()}).ok());
  ASSERT_TRUE(ck->Save(1).value().Wait().ok());
  const std::vector<float> first = emb;
  // Measured with the server stopped: a running one holds space reserved
  // ahead of its appends, which it gives back when it closes. The same
  // Checkpointer goes on against the restarted one.
  const std::string grpc = (*server)->grpc();
  auto restart = [&]() {
    // The server rebases the deltas and compacts what that leaves dead in
    // the background: measured once the directory stops changing, as a
    // user's du a minute later would see it.
    SettledDiskBytes(data);
    EXPECT_EQ((*server)->Stop(SIGTERM), 0);
    const uint64_t bytes = DiskBytes(data);
    server = ServerProcess::Start(data, {"--listen", grpc});
    EXPECT_TRUE(server.ok()) << server.status();
    return bytes;
  };
  const uint64_t after_first = restart();
  ASSERT_TRUE(server.ok());
  uint64_t changed = 0;
  SaveStats last;
  // Past the 8 deltas a client cuts its chains at where the server does
  // not rebase them.
  constexpr int64_t kLast = 12;
  for (int64_t step = 2; step <= kLast; ++step) {
    for (int64_t k = 0; k < kRows / 50; ++k) {
      const int64_t row = rng() % kRows;
      for (int64_t j = 0; j < kDim; ++j) emb[row * kDim + j] += d(rng);
      changed += kDim * sizeof(float);
    }
    auto h = ck->Save(step);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE(h->Wait().ok());
    last = h->stats();
  }
  // Step 1 went whole (byte-grouped floats compress a little).
  ASSERT_GT(after_first, kRows * kDim * sizeof(float) / 2);
  const uint64_t grown = restart() - after_first;
  ASSERT_TRUE(server.ok());
  printf("sparse: disk grew %llu bytes over steps 2-%lld for %llu changed\n",
         static_cast<unsigned long long>(grown), static_cast<long long>(kLast),
         static_cast<unsigned long long>(changed));
  // Rows picked twice are counted twice: `changed` is an upper bound.
  EXPECT_LT(grown, 2 * changed)
      << "disk grew " << grown << " bytes for " << changed << " changed bytes";
  EXPECT_EQ(last.chunks_delta, last.chunks - last.chunks_unchanged);
  EXPECT_EQ(last.codec_reasons["sparse_delta"], last.chunks_delta);
  EXPECT_EQ(last.chunks_no_base, 0u);
  // `stagger show` says why.
  RunResult show = RunProcess({testutil::BinDir() + "/stagger", "--server",
                               grpc, "show", "--job", "sparse", "--step",
                               std::to_string(kLast), "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.out;
  EXPECT_NE(show.out.find("\"codec_reasons\":{\"sparse_delta\":" +
                          std::to_string(last.chunks_delta) + "}"),
            std::string::npos)
      << show.out;

  // The step reads back bit-exact.
  std::vector<float> out(emb.size());
  ck->ClearRegistrations();
  ASSERT_TRUE(ck->Register({"emb", "F32", {kRows, kDim}, out.data()}).ok());
  ASSERT_EQ(ck->Load(kLast).value_or(-1), kLast);
  EXPECT_EQ(std::memcmp(out.data(), emb.data(), emb.size() * 4), 0);
  // So does the first, through every delta after it.
  ASSERT_EQ(ck->Load(1).value_or(-1), 1);
  EXPECT_EQ(std::memcmp(out.data(), first.data(), first.size() * 4), 0);
}

TEST(DiskUsageTest, GcGivesTheDiskBackWithDefaultSegments) {
  TempDir dir;
  // Default segments (1 GiB): every step lands in the one open segment.
  const std::string data = dir.path() + "/data";
  auto server = ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  auto ck = Open((*server)->grpc(), "gc");
  ASSERT_NE(ck, nullptr);
  constexpr size_t kStep = 4 << 20;
  std::vector<char> state(kStep);
  ASSERT_TRUE(
      ck->Register({"s", "U8", {static_cast<int64_t>(kStep)}, state.data()})
          .ok());
  std::mt19937_64 rng(9);
  for (int step = 1; step <= 8; ++step) {
    for (size_t i = 0; i < kStep; i += 8) {
      const uint64_t v = rng();
      std::memcpy(state.data() + i, &v, 8);
    }
    ASSERT_TRUE(ck->Save(step).value().Wait().ok()) << step;
  }
  const std::string segments = data + "/segments/gc";
  const uint64_t before = DiskBytes(segments);
  EXPECT_GE(before, 8 * kStep);
  RunResult gc = RunProcess({testutil::BinDir() + "/stagger", "--server",
                             (*server)->grpc(), "gc", "--job", "gc", "--keep",
                             "2", "--grace-s", "0"});
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  EXPECT_NE(gc.out.find("deleted 6 steps"), std::string::npos) << gc.out;
  // Random bytes are stored raw: the two kept steps need 2 x 4 MiB.
  uint64_t after = DiskBytes(segments);
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (after > 2 * kStep * 5 / 4 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    after = DiskBytes(segments);
  }
  printf("gc --keep 2: segments %llu -> %llu bytes (kept steps: %zu)\n",
         static_cast<unsigned long long>(before),
         static_cast<unsigned long long>(after), 2 * kStep);
  EXPECT_LE(after, 2 * kStep * 5 / 4)
      << before << " -> " << after << " bytes; gc said: " << gc.out;
  // `stagger ls` reports what the job holds on disk. The rebaser may still
  // be moving step 7's whole version out of its short-lived segment (random
  // bytes are no smaller as a delta): for a moment the job holds both
  // copies, so ask until the listing has settled too.
  RunResult ls;
  uint64_t listed = 0;
  do {
    ls = RunProcess({testutil::BinDir() + "/stagger", "--server",
                     (*server)->grpc(), "ls", "--job", "gc", "--json"});
    ASSERT_EQ(ls.exit_code, 0) << ls.out;
    const size_t at = ls.out.find("\"disk_bytes\":");
    ASSERT_NE(at, std::string::npos) << ls.out;
    listed = std::stoull(ls.out.substr(at + 13));
    if (listed <= 2 * kStep * 5 / 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (std::chrono::steady_clock::now() < until);
  EXPECT_GE(listed, 2 * kStep) << ls.out;
  EXPECT_LE(listed, 2 * kStep * 5 / 4) << ls.out;
  // The kept steps load; the collected ones are gone.
  std::vector<char> out(kStep);
  ck->ClearRegistrations();
  ASSERT_TRUE(
      ck->Register({"s", "U8", {static_cast<int64_t>(kStep)}, out.data()})
          .ok());
  ASSERT_EQ(ck->Load(8).value_or(-1), 8);
  EXPECT_EQ(out, state);
  EXPECT_EQ(ck->Load(7).value_or(-1), 7);
  EXPECT_EQ(ck->Load(6).status().code(), absl::StatusCode::kNotFound);
}

// Bytes process `pid` wrote to storage (/proc/PID/io write_bytes).
uint64_t WrittenBytes(pid_t pid) {
  FILE* f = fopen(("/proc/" + std::to_string(pid) + "/io").c_str(), "r");
  if (f == nullptr) return 0;
  char line[128];
  unsigned long long n = 0;
  while (fgets(line, sizeof(line), f) != nullptr) {
    if (sscanf(line, "write_bytes: %llu", &n) == 1) break;
  }
  fclose(f);
  return n;
}

// Dense weights saved whole (the client's policy sends raw where its
// encoder is the bottleneck; here every chunk goes whole, zstd): each put
// names its previous version, which the server turns into a delta of it.
// What a save stored fills segments of its own, so the old whole versions
// die a segment at a time and go without compaction copying the new ones:
// the server writes about the whole chunks plus their deltas.
TEST(DiskUsageTest, OldWholeVersionsLeaveWithoutTheNewOnesBeingCopied) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  auto server = ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  CheckpointerOptions o;
  o.servers = (*server)->grpc();
  o.job = "dense";
  o.codec = CodecChoice::kZstd;
  o.delta_chain_max = 0;  // every chunk whole
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  constexpr int64_t kN = 6 << 20;  // 24 MiB of fp32: six 4 MiB chunks
  std::vector<float> w(kN);
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (float& x : w) x = d(rng);
  ASSERT_TRUE((*ck)->Register({"w", "F32", {kN}, w.data()}).ok());
  ASSERT_TRUE((*ck)->Save(1).value().Wait().ok());
  const uint64_t after_first = SettledDiskBytes(data);
  const uint64_t written_first = WrittenBytes((*server)->pid());
  ASSERT_GT(written_first, 0u) << "no /proc/PID/io";
  uint64_t shipped = 0, raw = 0;
  for (int64_t step = 2; step <= 4; ++step) {
    for (float& x : w) x -= x * 1e-4f;  // a small update of every weight
    auto h = (*ck)->Save(step);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE(h->Wait().ok());
    EXPECT_EQ(h->stats().chunks_delta, 0u);
    shipped += h->stats().bytes_shipped;
    raw += h->stats().bytes_raw;
  }
  const uint64_t grown = SettledDiskBytes(data) - after_first;
  const uint64_t written = WrittenBytes((*server)->pid()) - written_first;
  printf(
      "dense whole: %llu raw, %llu shipped, disk grew %llu, server wrote "
      "%llu\n",
      static_cast<unsigned long long>(raw),
      static_cast<unsigned long long>(shipped),
      static_cast<unsigned long long>(grown),
      static_cast<unsigned long long>(written));
  // Each save adds about a delta of the version before it, far less than
  // the whole versions shipped.
  EXPECT_LT(grown, shipped / 2);
  // The whole versions and their deltas, not the new versions again: with
  // one segment for all, compaction copied each save's whole versions out
  // of the segment their predecessors left mostly dead (about 2x shipped).
  EXPECT_LT(written, shipped * 3 / 2);
  // Every step loads bit-exact: the newest whole, the older through deltas.
  std::vector<float> out(w.size());
  (*ck)->ClearRegistrations();
  ASSERT_TRUE((*ck)->Register({"w", "F32", {kN}, out.data()}).ok());
  ASSERT_EQ((*ck)->Load(4).value_or(-1), 4);
  EXPECT_EQ(std::memcmp(out.data(), w.data(), w.size() * 4), 0);
  ASSERT_EQ((*ck)->Load(1).value_or(-1), 1);
}

}  // namespace
}  // namespace stagger
