// Resharding: a step saved by 4 ranks (row slices of a 2-D F32 and a 3-D I32
// tensor, a replicated tensor, a per-rank tensor) loads bit-exact on 1, 2,
// 3, 4 and 6 ranks sharded by rows or by columns, and `stagger restore
// --consolidate` writes the global tensors.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "metrics/http_exporter.h"
#include "metrics/text_format.h"
#include "stagger/checkpointer.h"
#include "tests/testutil/process.h"

namespace stagger {
namespace {

constexpr uint64_t kChunk = 4096;  // the smallest chunk the options allow
constexpr uint32_t kSavers = 4;

// A global tensor and its row-major bytes.
struct Global {
  std::string name, dtype;
  std::vector<int64_t> shape;
  size_t element_size;
  std::vector<char> bytes;
};

Global MakeGlobal(const std::string& name, const std::string& dtype,
                  std::vector<int64_t> shape, size_t element_size,
                  uint32_t seed) {
  Global g{name, dtype, std::move(shape), element_size, {}};
  size_t n = element_size;
  for (int64_t d : g.shape) n *= static_cast<size_t>(d);
  g.bytes.resize(n);
  std::mt19937 rng(seed);
  for (char& c : g.bytes) c = static_cast<char>(rng());
  return g;
}

// Part `p` of `parts` of a dimension of `n`: (offset, size), the first
// n % parts parts one longer.
std::pair<int64_t, int64_t> Split(int64_t n, int64_t parts, int64_t p) {
  int64_t base = n / parts, rem = n % parts;
  return {p * base + std::min(p, rem), base + (p < rem ? 1 : 0)};
}

struct Slice {
  std::vector<int64_t> offset, shape;
};

Slice SliceAlong(const Global& g, size_t axis, uint32_t parts, uint32_t p) {
  Slice s{std::vector<int64_t>(g.shape.size(), 0), g.shape};
  auto [off, len] = Split(g.shape[axis], parts, p);
  s.offset[axis] = off;
  s.shape[axis] = len;
  return s;
}

// The bytes of slice `s` of `g`, element by element.
std::vector<char> Extract(const Global& g, const Slice& s) {
  size_t n = 1;
  for (int64_t d : s.shape) n *= static_cast<size_t>(d);
  std::vector<char> out(n * g.element_size);
  std::vector<int64_t> idx(s.shape.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    size_t gi = 0;
    for (size_t d = 0; d < s.shape.size(); ++d) {
      gi = gi * static_cast<size_t>(g.shape[d]) +
           static_cast<size_t>(s.offset[d] + idx[d]);
    }
    std::memcpy(&out[i * g.element_size], &g.bytes[gi * g.element_size],
                g.element_size);
    for (size_t d = s.shape.size(); d-- > 0;) {
      if (++idx[d] < s.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<char> RankBytes(uint32_t rank) {
  std::vector<char> b(40);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>(rank * 31 + i);
  return b;
}

// A tensor holding slice `offset` of the global shape `global`.
TensorSpec Sliced(const std::string& name, const std::string& dtype,
                  std::vector<int64_t> shape, void* data,
                  std::vector<int64_t> global, std::vector<int64_t> offset) {
  TensorSpec t{name, dtype, std::move(shape), data};
  t.global_shape = std::move(global);
  t.global_offset = std::move(offset);
  return t;
}

// A per-rank scalar.
std::vector<char> Count(uint32_t rank) {
  int64_t v = 100 + rank;
  std::vector<char> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

class ReshardTest : public ::testing::Test {
 protected:
  ReshardTest()
      : w_(MakeGlobal("w", "F32", {90, 200}, 4, 1)),
        e_(MakeGlobal("e", "I32", {30, 12, 20}, 4, 2)),
        norm_(MakeGlobal("norm", "F32", {300}, 4, 3)),
        part_(MakeGlobal("part", "F32", {16, 64}, 4, 4)) {}

  std::unique_ptr<Checkpointer> Open(uint32_t rank, uint32_t world) {
    CheckpointerOptions o;
    o.servers = servers_.empty() ? "embedded:" + dir_.path() : servers_;
    o.job = job_;
    o.rank = rank;
    o.world_size = world;
    o.chunk_size = kChunk;
    o.replicas = replicas_;
    auto ck = Checkpointer::Open(o);
    EXPECT_TRUE(ck.ok()) << ck.status();
    return ck.ok() ? std::move(*ck) : nullptr;
  }

  // Saves step 1 with kSavers ranks, each holding a row slice of w, e and
  // (ranks 0..2 only) part, all of norm, and two per-rank tensors.
  void SaveFourRanks() {
    std::vector<std::unique_ptr<Checkpointer>> cks;
    std::vector<std::vector<char>> held;
    held.reserve(8 * kSavers);
    for (uint32_t r = 0; r < kSavers; ++r) {
      cks.push_back(Open(r, kSavers));
      ASSERT_NE(cks.back(), nullptr);
      for (const Global* g : {&w_, &e_, &part_}) {
        if (g == &part_ && r == 3) continue;  // leaves rows 12..16 unsaved
        Slice s = SliceAlong(*g, 0, kSavers, r);
        held.push_back(Extract(*g, s));
        ASSERT_TRUE(
            cks.back()
                ->Register(Sliced(g->name, g->dtype, s.shape,
                                  held.back().data(), g->shape, s.offset))
                .ok());
      }
      held.push_back(norm_.bytes);
      ASSERT_TRUE(cks.back()
                      ->Register(Sliced("norm", "F32", norm_.shape,
                                        held.back().data(), norm_.shape, {0}))
                      .ok());
      held.push_back(RankBytes(r));
      ASSERT_TRUE(
          cks.back()->Register({"rng", "U8", {40}, held.back().data()}).ok());
      held.push_back(Count(r));
      ASSERT_TRUE(
          cks.back()->Register({"count", "I64", {}, held.back().data()}).ok());
    }
    std::vector<SaveHandle> handles;
    for (auto& ck : cks) {
      auto h = ck->Save(1);
      ASSERT_TRUE(h.ok()) << h.status();
      handles.push_back(*h);
    }
    for (uint32_t r = 0; r < kSavers; ++r) {
      ASSERT_TRUE(handles[r].Wait().ok()) << handles[r].Wait();
      // The replicated tensor travels once, from rank 0.
      uint64_t want = (r == 0 ? norm_.bytes.size() : 0) + 40 + 8;
      for (const Global* g : {&w_, &e_, &part_}) {
        if (g == &part_ && r == 3) continue;
        want += Extract(*g, SliceAlong(*g, 0, kSavers, r)).size();
      }
      EXPECT_EQ(handles[r].stats().bytes_raw, want) << "rank " << r;
    }
    auto steps = cks[0]->Steps(false);
    ASSERT_TRUE(steps.ok());
    ASSERT_EQ(steps->size(), 1u);
    EXPECT_EQ((*steps)[0].raw_bytes,
              w_.bytes.size() + e_.bytes.size() + norm_.bytes.size() +
                  part_.bytes.size() / 4 * 3 + kSavers * (40 + 8));
  }

  // Loads step 1 on `world` ranks, w and e sliced along `axis` (columns:
  // their last dimension), and checks every byte.
  void LoadAndCheck(uint32_t world, bool columns) {
    for (uint32_t r = 0; r < world; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r, " of ", world,
                                columns ? " by columns" : " by rows"));
      auto ck = Open(r, world);
      ASSERT_NE(ck, nullptr);
      std::map<std::string, std::vector<char>> out, want;
      for (const Global* g : {&w_, &e_}) {
        Slice s = SliceAlong(*g, columns ? g->shape.size() - 1 : 0, world, r);
        want[g->name] = Extract(*g, s);
        out[g->name].assign(want[g->name].size(), 0x55);
        ASSERT_TRUE(
            ck->Register(Sliced(g->name, g->dtype, s.shape, out[g->name].data(),
                                g->shape, s.offset))
                .ok());
      }
      out["norm"].assign(norm_.bytes.size(), 0);
      ASSERT_TRUE(ck->Register(Sliced("norm", "F32", norm_.shape,
                                      out["norm"].data(), norm_.shape, {0}))
                      .ok());
      want["norm"] = norm_.bytes;
      // A per-rank tensor: this rank's own copy where one was saved.
      out["rng"].assign(40, 0);
      ASSERT_TRUE(ck->Register({"rng", "U8", {40}, out["rng"].data()}).ok());
      want["rng"] = RankBytes(r < kSavers ? r : 0);
      out["count"].assign(8, 0);
      ASSERT_TRUE(ck->Register({"count", "I64", {}, out["count"].data()}).ok());
      want["count"] = Count(r < kSavers ? r : 0);
      auto loaded = ck->Load(kLatestStep);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_EQ(*loaded, 1);
      for (const auto& [name, bytes] : want) {
        EXPECT_TRUE(out[name] == bytes) << "tensor " << name;
      }
      // A rank the savers lacked is told it got rank 0's per-rank tensors;
      // the sliced and replicated ones are nobody's in particular.
      const std::map<std::string, uint32_t> borrowed =
          r < kSavers
              ? std::map<std::string, uint32_t>{}
              : std::map<std::string, uint32_t>{{"count", 0}, {"rng", 0}};
      EXPECT_EQ(ck->LastLoadFromOtherRanks(), borrowed);
      // The manifests planning read: on the world saved, this rank's and
      // rank 0's (replicated tensors); then, where those do not cover the
      // slices (columns of a step saved by rows, another world), those of
      // the savers whose slices overlap this rank's, with rank 0 (the
      // replicated tensor) and this rank (its per-rank tensors).
      std::set<uint32_t> holders = {0};
      if (r < kSavers) holders.insert(r);
      for (uint32_t s = 0; s < kSavers; ++s) {
        if (columns) {
          holders.insert(s);  // every saver holds rows of every column
          continue;
        }
        for (const Global* g : {&w_, &e_}) {
          auto [so, sn] = Split(g->shape[0], kSavers, s);
          auto [lo, ln] = Split(g->shape[0], world, r);
          if (std::max(so, lo) < std::min(so + sn, lo + ln)) holders.insert(s);
        }
      }
      const ClientMetrics m = ck->Metrics();
      const uint32_t own = r == 0 ? 1u : 2u;
      const uint32_t sliced = static_cast<uint32_t>(holders.size());
      EXPECT_EQ(m.last_load_manifests,
                world != kSavers ? sliced : (columns ? own + sliced : own));
      EXPECT_GT(m.load_manifest_bytes, 0u);
      EXPECT_GT(m.last_load_plan_s, 0);
    }
  }

  // Defined below the metrics helpers: see there.
  double SentForLoad(uint32_t world, bool columns, double* ranges);

  testutil::TempDir dir_;
  std::string servers_;  // empty: an embedded server in dir_
  std::string job_ = "rs";
  uint32_t replicas_ = 1;
  Global w_, e_, norm_, part_;
};

TEST_F(ReshardTest, LoadsOnAnyWorldSizeByRowsAndColumns) {
  SaveFourRanks();
  for (uint32_t world : {1u, 2u, 3u, 4u, 6u}) {
    for (bool columns : {false, true}) {
      LoadAndCheck(world, columns);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(ReshardTest, BlocksAndSingleElementsLoadBitExact) {
  SaveFourRanks();
  std::mt19937 rng(11);
  auto ck = Open(0, 1);
  ASSERT_NE(ck, nullptr);
  for (int iter = 0; iter < 20; ++iter) {
    Slice s{{}, {}};
    for (int64_t d : e_.shape) {
      int64_t lo = rng() % d;
      int64_t len = 1 + rng() % (d - lo);
      if (iter % 5 == 0) len = 1;  // one element
      s.offset.push_back(lo);
      s.shape.push_back(len);
    }
    std::vector<char> out(Extract(e_, s).size(), 0);
    ck->ClearRegistrations();
    ASSERT_TRUE(ck->Register(Sliced("e", "I32", s.shape, out.data(), e_.shape,
                                    s.offset))
                    .ok());
    ASSERT_TRUE(ck->Load(1).ok());
    EXPECT_TRUE(out == Extract(e_, s)) << "block at " << iter;
  }
}

TEST_F(ReshardTest, UncoveredSliceFailsNamingTheRegion) {
  SaveFourRanks();
  // Rank 3 never saved rows 12..16 of `part`.
  std::vector<char> all(part_.bytes.size());
  auto ck = Open(0, 1);
  ASSERT_NE(ck, nullptr);
  ASSERT_TRUE(ck->Register(Sliced("part", "F32", {16, 64}, all.data(), {16, 64},
                                  {0, 0}))
                  .ok());
  auto loaded = ck->Load(1);
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(loaded.status().message().find("'part'"), std::string::npos)
      << loaded.status();
  EXPECT_NE(loaded.status().message().find("[12:16,0:64]"), std::string::npos)
      << loaded.status();

  // What was saved still loads: rows 0..8 on rank 0 of 2.
  auto ck0 = Open(0, 2);
  ASSERT_NE(ck0, nullptr);
  Slice top = SliceAlong(part_, 0, 2, 0);
  std::vector<char> half(Extract(part_, top).size());
  ASSERT_TRUE(ck0->Register(Sliced("part", "F32", top.shape, half.data(),
                                   part_.shape, top.offset))
                  .ok());
  ASSERT_TRUE(ck0->Load(1).ok());
  EXPECT_TRUE(half == Extract(part_, top));
}

TEST_F(ReshardTest, MismatchedDescriptionsAreRefused) {
  SaveFourRanks();
  auto ck = Open(0, 1);
  ASSERT_NE(ck, nullptr);
  std::vector<char> buf(w_.bytes.size() + 1024);
  struct Case {
    TensorSpec spec;
    absl::StatusCode code;
  } cases[] = {
      {Sliced("w", "I32", {90, 200}, buf.data(), {90, 200}, {0, 0}),
       absl::StatusCode::kInvalidArgument},
      {Sliced("w", "F32", {90, 200}, buf.data(), {90, 201}, {0, 0}),
       absl::StatusCode::kInvalidArgument},
      {{"w", "F32", {90, 200}, buf.data()},  // unsharded: [90,200] is global
       absl::StatusCode::kOk},
      {{"rng", "U8", {41}, buf.data()}, absl::StatusCode::kInvalidArgument},
      {{"nope", "F32", {4}, buf.data()}, absl::StatusCode::kNotFound},
  };
  for (const Case& c : cases) {
    ck->ClearRegistrations();
    ASSERT_TRUE(ck->Register(c.spec).ok());
    auto loaded = ck->Load(1);
    EXPECT_EQ(loaded.status().code(), c.code) << loaded.status();
    if (!loaded.ok()) {
      EXPECT_NE(loaded.status().message().find("'" + c.spec.name + "'"),
                std::string::npos)
          << loaded.status();
    }
  }
  EXPECT_EQ(std::memcmp(buf.data(), w_.bytes.data(), w_.bytes.size()), 0);
}

TEST_F(ReshardTest, RanksHoldingOnlyReplicatedTensorsCommitEmptyShards) {
  std::vector<std::unique_ptr<Checkpointer>> cks;
  std::vector<SaveHandle> handles;
  for (uint32_t r = 0; r < 2; ++r) {
    cks.push_back(Open(r, 2));
    ASSERT_NE(cks.back(), nullptr);
    TensorSpec norm{"norm", "F32", norm_.shape, norm_.bytes.data()};
    norm.global_shape = norm_.shape;
    norm.global_offset = {0};
    ASSERT_TRUE(cks.back()->Register(norm).ok());
    auto h = cks.back()->Save(7);
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  for (auto& h : handles) ASSERT_TRUE(h.Wait().ok()) << h.Wait();
  EXPECT_EQ(handles[0].stats().chunks, 1u);
  EXPECT_EQ(handles[1].stats().chunks, 0u);
  for (uint32_t r = 0; r < 3; ++r) {
    auto ck = Open(r, 3);
    ASSERT_NE(ck, nullptr);
    std::vector<char> out(norm_.bytes.size());
    TensorSpec norm{"norm", "F32", norm_.shape, out.data()};
    norm.global_shape = norm_.shape;
    norm.global_offset = {0};
    ASSERT_TRUE(ck->Register(norm).ok());
    auto loaded = ck->Load(kLatestStep);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(*loaded, 7);
    EXPECT_TRUE(out == norm_.bytes) << "rank " << r;
  }
}

// The safetensors header of `file`: per tensor, its JSON object.
std::map<std::string, std::string> Header(const std::string& file,
                                          uint64_t* data_start) {
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | uint8_t(file[i]);
  *data_start = 8 + len;
  std::string json = file.substr(8, len);
  std::map<std::string, std::string> out;
  size_t pos = 1;  // after '{'
  while ((pos = json.find('"', pos)) != std::string::npos) {
    size_t end = json.find('"', pos + 1);
    std::string key = json.substr(pos + 1, end - pos - 1);
    size_t open = json.find('{', end);
    size_t close = json.find('}', open);
    out[key] = json.substr(open, close - open + 1);
    pos = close + 1;
  }
  return out;
}

// The server's bytes sent to readers, from its metrics page.
double ReadBytes(const testutil::ServerProcess& s, const char* sample) {
  auto page = metrics::HttpGet(s.metrics(), "/metrics");
  EXPECT_TRUE(page.ok()) << page.status();
  if (!page.ok()) return -1;
  auto v = metrics::SampleValue(*page, sample);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : -1;
}

// Saves step 1 on 4 ranks to one server process, loads it on `world`
// ranks (by rows or columns) and returns the bytes the server sent for
// the load (random bytes are stored raw: what is sent is what is loaded);
// `ranges` gets its range reads.
double ReshardTest::SentForLoad(uint32_t world, bool columns, double* ranges) {
  auto a = testutil::ServerProcess::Start(dir_.path() + "/a",
                                          {"--metrics-listen", "127.0.0.1:0"});
  EXPECT_TRUE(a.ok()) << a.status();
  if (!a.ok()) return -1;
  servers_ = (*a)->grpc();
  SaveFourRanks();
  const double before = ReadBytes(**a, "stagger_server_read_bytes_total");
  LoadAndCheck(world, columns);
  *ranges = ReadBytes(**a, "stagger_server_ranges_read_total");
  return ReadBytes(**a, "stagger_server_read_bytes_total") - before;
}

// A load on 3 ranks of rows saved by 4 puts slice boundaries inside
// chunks: each rank is sent the part of such a chunk it reads, not the
// whole chunk, so the server sends every saved byte once.
TEST_F(ReshardTest, RowReshardIsSentEachByteOnce) {
  double ranges = 0;
  const double sent = SentForLoad(3, false, &ranges);
  // w and e once; norm, rng and count on each rank.
  EXPECT_EQ(sent, static_cast<double>(w_.bytes.size() + e_.bytes.size() +
                                      3 * (norm_.bytes.size() + 40 + 8)));
  EXPECT_GT(ranges, 0);
}

// Flips a payload byte of every chunk record in the segments under `data`;
// returns how many.
// Flips a payload byte of every record in the segments under `dir`.
int CorruptEveryRecord(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().extension() != ".seg") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = std::filesystem::file_size(e.path());
    for (uint64_t at = 0; at + 65 <= size; at += 4096) {
      char magic[4];
      f.seekg(static_cast<std::streamoff>(at));
      f.read(magic, 4);
      if (std::string(magic, 4) != "STGR") continue;
      char c = 0;
      f.seekg(static_cast<std::streamoff>(at + 64));
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x01);
      f.seekp(static_cast<std::streamoff>(at + 64));
      f.write(&c, 1);
      ++n;
    }
  }
  return n;
}

// A load by columns of what was saved by rows: each rank needs a strided
// part of every row of w (400 of each 800 bytes), asked for as parts of
// each chunk, so w is sent about once (a chunk whose parts are too short
// on average goes whole), not twice. e's rows are too short to pay
// (40-byte parts): each rank is sent all of e.
TEST_F(ReshardTest, ColumnReshardIsSentTheRowPartsItNeeds) {
  double ranges = 0;
  const double sent = SentForLoad(2, true, &ranges);
  const double want =
      static_cast<double>(w_.bytes.size() + 2 * e_.bytes.size() +
                          2 * (norm_.bytes.size() + 40 + 8));
  EXPECT_GE(sent, want);
  EXPECT_LT(sent, want + kChunk)
      << "w sent twice would be " << want + w_.bytes.size();
  EXPECT_GT(ranges, 0);
}

// Two copies of every chunk, every record of one server's copy bad: its
// range reads fail (DATA_LOSS), and the load falls back to whole chunks,
// from the other server, bit-exact; the bad copies read are repaired. Each
// server holds the bad copies in turn.
TEST_F(ReshardTest, RangeOfABadCopyFallsBackToTheOtherCopy) {
  const std::string a_dir = dir_.path() + "/a", b_dir = dir_.path() + "/b";
  auto a = testutil::ServerProcess::Start(a_dir,
                                          {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = testutil::ServerProcess::Start(b_dir,
                                          {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(b.ok()) << b.status();
  servers_ = (*a)->grpc() + "," + (*b)->grpc();
  replicas_ = 2;
  // Which copy a range is asked of first follows the servers' ranking,
  // which hangs on their addresses (ports picked at random). So each copy
  // in turn is the bad one, in a job of its own: every chunk read by
  // ranges meets a bad first copy in one of the two.
  double bad_range_reads = 0;
  for (const auto& [bad, bad_dir, good, job] :
       {std::tuple{a->get(), a_dir, b->get(), "rs"},
        std::tuple{b->get(), b_dir, a->get(), "rs2"}}) {
    SCOPED_TRACE(absl::StrCat("job ", job, ", bad copies on ", bad->grpc()));
    job_ = job;
    SaveFourRanks();
    ASSERT_GT(CorruptEveryRecord(bad_dir + "/segments/" + job), 10);
    const double written =
        ReadBytes(*bad, "stagger_server_chunks_written_total");
    const double failures =
        ReadBytes(*bad, "stagger_server_verify_failures_total");
    const double ranges = ReadBytes(*bad, "stagger_server_range_decodes_total");
    const double served = ReadBytes(*good, "stagger_server_chunks_read_total");
    LoadAndCheck(3, false);  // every byte as saved
    EXPECT_GT(ReadBytes(*bad, "stagger_server_verify_failures_total"),
              failures);
    EXPECT_GT(ReadBytes(*good, "stagger_server_chunks_read_total"), served);
    // The bad copies read were repaired: rewritten where they were bad.
    EXPECT_GT(ReadBytes(*bad, "stagger_server_chunks_written_total"), written);
    bad_range_reads +=
        ReadBytes(*bad, "stagger_server_range_decodes_total") - ranges;
  }
  EXPECT_GT(bad_range_reads, 0);
}

TEST_F(ReshardTest, TwoServersLoadAndConsolidate) {
  auto a = testutil::ServerProcess::Start(dir_.path() + "/a");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = testutil::ServerProcess::Start(dir_.path() + "/b");
  ASSERT_TRUE(b.ok()) << b.status();
  servers_ = (*a)->grpc() + "," + (*b)->grpc();
  SaveFourRanks();
  LoadAndCheck(3, true);
  LoadAndCheck(2, false);

  std::string out = dir_.path() + "/restored";
  auto run = testutil::RunProcess({testutil::BinDir() + "/stagger", "--server",
                                   servers_, "restore", "--job", "rs",
                                   "--consolidate", "--out", out});
  ASSERT_NE(run.exit_code, 0) << "part has an unsaved region: " << run.out;
  EXPECT_NE(run.out.find("'part'"), std::string::npos) << run.out;
  EXPECT_FALSE(std::ifstream(out + "/model.safetensors").good());
  EXPECT_FALSE(std::ifstream(out + "/model.safetensors.partial").good());

  // Steps 2 and 3 without the incomplete tensor. In step 2 the per-rank
  // tensors differ between ranks: one file cannot hold them, and the
  // restore says which. In step 3 every rank holds the same ones (as
  // replicated state is): they are written once.
  auto save_step = [&](int64_t step, bool same_per_rank) {
    std::vector<std::unique_ptr<Checkpointer>> cks;
    std::vector<std::vector<char>> held;
    held.reserve(8 * kSavers);
    std::vector<SaveHandle> handles;
    for (uint32_t r = 0; r < kSavers; ++r) {
      cks.push_back(Open(r, kSavers));
      ASSERT_NE(cks.back(), nullptr);
      for (const Global* g : {&w_, &e_}) {
        Slice s = SliceAlong(*g, 0, kSavers, r);
        held.push_back(Extract(*g, s));
        ASSERT_TRUE(
            cks.back()
                ->Register(Sliced(g->name, g->dtype, s.shape,
                                  held.back().data(), g->shape, s.offset))
                .ok());
      }
      held.push_back(norm_.bytes);
      ASSERT_TRUE(cks.back()
                      ->Register(Sliced("norm", "F32", norm_.shape,
                                        held.back().data(), norm_.shape, {0}))
                      .ok());
      const uint32_t as = same_per_rank ? 0 : r;
      held.push_back(RankBytes(as));
      ASSERT_TRUE(
          cks.back()->Register({"rng", "U8", {40}, held.back().data()}).ok());
      held.push_back(Count(as));
      ASSERT_TRUE(
          cks.back()->Register({"count", "I64", {}, held.back().data()}).ok());
      auto h = cks.back()->Save(step);
      ASSERT_TRUE(h.ok()) << h.status();
      handles.push_back(*h);
    }
    for (auto& h : handles) ASSERT_TRUE(h.Wait().ok()) << h.Wait();
  };
  save_step(2, /*same_per_rank=*/false);
  run = testutil::RunProcess({testutil::BinDir() + "/stagger", "--server",
                              servers_, "restore", "--job", "rs", "--step", "2",
                              "--consolidate", "--out", out});
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_NE(run.out.find("tensor 'count' is per-rank (no global shape) and "
                         "rank 1 saved other values"),
            std::string::npos)
      << run.out;
  EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors"));
  save_step(3, /*same_per_rank=*/true);
  run = testutil::RunProcess({testutil::BinDir() + "/stagger", "--server",
                              servers_, "restore", "--job", "rs",
                              "--consolidate", "--out", out});
  ASSERT_EQ(run.exit_code, 0) << run.out;
  std::ifstream f(out + "/model.safetensors", std::ios::binary);
  ASSERT_TRUE(f.good());
  std::string file((std::istreambuf_iterator<char>(f)), {});
  uint64_t data = 0;
  auto header = Header(file, &data);
  EXPECT_NE(header["__metadata__"].find("\"step\":\"3\""), std::string::npos);
  // Per-rank tensors, the same on every rank: written once.
  Global rng{"rng", "U8", {40}, 1, RankBytes(0)};
  Global count{"count", "I64", {}, 8, Count(0)};
  uint64_t total = 0;
  for (const Global* g : {&count, &e_, &norm_, &rng, &w_}) {
    SCOPED_TRACE(g->name);
    const std::string& h = header[g->name];
    EXPECT_NE(h.find("\"dtype\":\"" + g->dtype + "\""), std::string::npos) << h;
    EXPECT_NE(h.find("\"shape\":[" + absl::StrJoin(g->shape, ",") + "]"),
              std::string::npos)
        << h;
    uint64_t begin = 0, end = 0;
    size_t at = h.find("\"data_offsets\":[");
    ASSERT_NE(at, std::string::npos) << h;
    ASSERT_EQ(sscanf(h.c_str() + at, "\"data_offsets\":[%" SCNu64 ",%" SCNu64,
                     &begin, &end),
              2);
    ASSERT_EQ(end - begin, g->bytes.size());
    ASSERT_LE(data + end, file.size());
    EXPECT_EQ(std::memcmp(file.data() + data + begin, g->bytes.data(),
                          g->bytes.size()),
              0);
    total += g->bytes.size();
  }
  EXPECT_EQ(header.size(), 6u);  // five tensors and the metadata
  EXPECT_EQ(file.size(), data + total);
}

}  // namespace
}  // namespace stagger
