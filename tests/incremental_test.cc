// Incremental saves: unchanged chunks travel as references, floats are
// byte-grouped, and every step of a drifting chain loads back bit-exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "client/embedded/embedded.h"
#include "format/crc32c.h"
#include "server/server.h"
#include "stagger/checkpointer.h"
#include "tests/testutil/pattern.h"
#include "tests/testutil/process.h"

namespace stagger {
namespace {

constexpr size_t kChunk = 64 << 10;

class IncrementalTest : public ::testing::Test {
 protected:
  // On an embedded server in dir_, or on `servers` (a stagger-server).
  std::unique_ptr<Checkpointer> Open(const std::string& codec = "auto",
                                     const std::string& servers = "") {
    CheckpointerOptions o;
    o.servers = servers.empty() ? "embedded:" + dir_.path() : servers;
    o.job = "incr";
    o.chunk_size = kChunk;
    o.codec = *ParseCodecChoice(codec);
    // These tests check what the encoders produce: every chunk encoded.
    o.adaptive_codec = false;
    auto ck = Checkpointer::Open(o);
    EXPECT_TRUE(ck.ok()) << ck.status();
    return ck.ok() ? std::move(*ck) : nullptr;
  }
  testutil::TempDir dir_;
};

std::vector<float> Weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(n);
  for (float& x : w) x = d(rng);
  return w;
}

TEST_F(IncrementalTest, UnchangedChunksAreReferencedNotShipped) {
  auto ck = Open();
  std::vector<char> t(8 * kChunk);
  testutil::FillPattern(t, 1);
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  auto h1 = ck->Save(1);
  ASSERT_TRUE(h1.ok() && h1->Wait().ok());
  EXPECT_EQ(h1->stats().chunks_unchanged, 0u);
  const std::vector<char> step1 = t;

  t[3 * kChunk + 17] ^= 1;  // one byte of chunk 3 changes
  auto h2 = ck->Save(2);
  ASSERT_TRUE(h2.ok() && h2->Wait().ok());
  SaveStats s = h2->stats();
  EXPECT_EQ(s.chunks, 8u);
  EXPECT_EQ(s.chunks_unchanged, 7u);
  EXPECT_EQ(s.bytes_raw, t.size());
  EXPECT_LE(s.bytes_shipped, kChunk);  // at most the one changed chunk
  // Steps report what they reference and what they added.
  auto steps = ck->Steps(false);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].new_bytes, h1->stats().bytes_shipped);
  EXPECT_EQ((*steps)[1].new_bytes, s.bytes_shipped);
  EXPECT_LT((*steps)[1].new_bytes, (*steps)[1].stored_bytes);

  for (auto [step, want] :
       {std::pair<int64_t, const std::vector<char>*>{1, &step1}, {2, &t}}) {
    std::vector<char> out(t.size(), 0);
    ck->ClearRegistrations();
    ASSERT_TRUE(
        ck->Register({"t", "U8", {int64_t(out.size())}, out.data()}).ok());
    ASSERT_EQ(*ck->Load(step), step);
    EXPECT_TRUE(out == *want) << "step " << step;
  }
}

TEST_F(IncrementalTest, FloatsAreByteGroupedAndSmallerThanPlainZstd) {
  std::vector<float> w = Weights(16 * kChunk / 4, 5);
  uint64_t shipped[2] = {0, 0};
  int i = 0;
  for (const char* codec : {"zstd", "auto"}) {
    testutil::TempDir dir;
    CheckpointerOptions o;
    o.servers = "embedded:" + dir.path();
    o.job = "bg";
    o.chunk_size = kChunk;
    o.codec = *ParseCodecChoice(codec);
    o.adaptive_codec = false;
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok());
    ASSERT_TRUE(
        (*ck)->Register({"w", "F32", {int64_t(w.size())}, w.data()}).ok());
    auto h = (*ck)->Save(1);
    ASSERT_TRUE(h.ok() && h->Wait().ok());
    auto mix = h->stats().codec_chunks;
    if (std::string(codec) == "auto") {
      EXPECT_EQ(mix["bytegroup+zstd"], 16u);
    } else {
      EXPECT_EQ(mix["bytegroup+zstd"], 0u);
    }
    shipped[i++] = h->stats().bytes_shipped;
    std::vector<float> out(w.size(), 1.0f);
    (*ck)->ClearRegistrations();
    ASSERT_TRUE(
        (*ck)->Register({"w", "F32", {int64_t(out.size())}, out.data()}).ok());
    ASSERT_TRUE((*ck)->Load(1).ok());
    EXPECT_EQ(std::memcmp(out.data(), w.data(), w.size() * 4), 0);
  }
  EXPECT_LT(shipped[1], shipped[0]);  // grouping beats plain zstd on floats
}

TEST_F(IncrementalTest, TwentyStepsOfDriftingDataLoadBitExact) {
  auto ck = Open();
  std::vector<float> w = Weights(12 * kChunk / 4, 7);
  std::vector<char> frozen(5 * kChunk);
  testutil::FillPattern(frozen, 9);
  ASSERT_TRUE(ck->Register({"w", "F32", {int64_t(w.size())}, w.data()}).ok());
  ASSERT_TRUE(
      ck->Register({"frozen", "U8", {int64_t(frozen.size())}, frozen.data()})
          .ok());
  std::mt19937 rng(11);
  std::vector<std::vector<float>> saved;
  for (int step = 1; step <= 20; ++step) {
    // Drift: a few chunks get small updates, the rest stay.
    for (int k = 0; k < 3; ++k) {
      size_t c = rng() % 12;
      for (size_t j = 0; j < kChunk / 4; j += 7) {
        w[c * kChunk / 4 + j] += 1e-4f * static_cast<float>(step);
      }
    }
    auto h = ck->Save(step);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h->Wait().ok());
    if (step > 1) {
      EXPECT_GE(h->stats().chunks_unchanged, 5u + 12u - 3u);
    }
    saved.push_back(w);
  }
  ck->ClearRegistrations();
  std::vector<float> out(w.size());
  std::vector<char> fout(frozen.size());
  ASSERT_TRUE(
      ck->Register({"w", "F32", {int64_t(out.size())}, out.data()}).ok());
  ASSERT_TRUE(
      ck->Register({"frozen", "U8", {int64_t(fout.size())}, fout.data()}).ok());
  for (int step = 1; step <= 20; ++step) {
    ASSERT_EQ(*ck->Load(step), step);
    EXPECT_EQ(std::memcmp(out.data(), saved[step - 1].data(), w.size() * 4), 0)
        << "step " << step;
    EXPECT_TRUE(fout == frozen) << "step " << step;
  }
}

TEST_F(IncrementalTest, DeltasAcrossTwoServersLoadBitExact) {
  // Chunks spread over two servers; every version of a chunk (and so each
  // delta and its base) must land on the same one.
  auto a = testutil::ServerProcess::Start(dir_.path() + "/a");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = testutil::ServerProcess::Start(dir_.path() + "/b");
  ASSERT_TRUE(b.ok()) << b.status();
  CheckpointerOptions o;
  o.servers = (*a)->grpc() + "," + (*b)->grpc();
  o.job = "two";
  o.chunk_size = kChunk;
  o.adaptive_codec = false;
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  std::vector<float> w = Weights(16 * kChunk / 4, 21);
  ASSERT_TRUE(
      (*ck)->Register({"w", "F32", {int64_t(w.size())}, w.data()}).ok());
  std::vector<std::vector<float>> saved;
  for (int step = 1; step <= 5; ++step) {
    for (float& x : w) x += x * 1e-3f;  // every chunk changes a little
    auto h = (*ck)->Save(step);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h->Wait().ok()) << h->Wait();
    if (step > 1) {
      EXPECT_EQ(h->stats().chunks_delta, 16u) << step;
    }
    saved.push_back(w);
  }
  std::vector<float> out(w.size());
  (*ck)->ClearRegistrations();
  ASSERT_TRUE(
      (*ck)->Register({"w", "F32", {int64_t(out.size())}, out.data()}).ok());
  for (int step = 1; step <= 5; ++step) {
    auto loaded = (*ck)->Load(step);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(std::memcmp(out.data(), saved[step - 1].data(), w.size() * 4), 0)
        << "step " << step;
  }
}

TEST_F(IncrementalTest, DenseUpdatesTravelAsSmallDeltas) {
  auto ck = Open();
  std::vector<float> w = Weights(8 * kChunk / 4, 13);
  ASSERT_TRUE(ck->Register({"w", "F32", {int64_t(w.size())}, w.data()}).ok());
  auto h1 = ck->Save(1);
  ASSERT_TRUE(h1.ok() && h1->Wait().ok());
  const std::vector<float> w1 = w;
  for (float& x : w) x += x * 1e-3f;  // every weight moves a little
  auto h2 = ck->Save(2);
  ASSERT_TRUE(h2.ok() && h2->Wait().ok());
  SaveStats s1 = h1->stats(), s2 = h2->stats();
  EXPECT_EQ(s2.chunks_delta, 8u);
  // Either delta codec, whichever is smaller on the chunk's sample.
  EXPECT_EQ(s2.codec_chunks["xor+bytegroup+zstd"] +
                s2.codec_chunks["num+bytegroup+zstd"],
            8u);
  EXPECT_LT(s2.bytes_shipped, s1.bytes_shipped);
  std::vector<float> out(w.size());
  ck->ClearRegistrations();
  ASSERT_TRUE(
      ck->Register({"w", "F32", {int64_t(out.size())}, out.data()}).ok());
  ASSERT_EQ(*ck->Load(2), 2);
  EXPECT_EQ(std::memcmp(out.data(), w.data(), w.size() * 4), 0);
  ASSERT_EQ(*ck->Load(1), 1);
  EXPECT_EQ(std::memcmp(out.data(), w1.data(), w.size() * 4), 0);
}

// Saves 7 steps of drifting weights through `servers` with chains cut
// every 2 deltas; returns chunks_delta per save and checks every step
// loads back bit-exact.
std::vector<uint64_t> SaveDriftingSteps(const std::string& servers) {
  CheckpointerOptions o;
  o.servers = servers;
  o.job = "chain";
  o.chunk_size = kChunk;
  o.delta_chain_max = 2;
  o.adaptive_codec = false;
  auto ck = Checkpointer::Open(o);
  EXPECT_TRUE(ck.ok()) << ck.status();
  if (!ck.ok()) return {};
  std::vector<float> w = Weights(kChunk / 4, 17);
  EXPECT_TRUE(
      (*ck)->Register({"w", "F32", {int64_t(w.size())}, w.data()}).ok());
  std::vector<uint64_t> deltas;
  std::vector<std::vector<float>> saved;
  for (int step = 1; step <= 7; ++step) {
    for (float& x : w) x += 1e-4f;
    auto h = (*ck)->Save(step);
    EXPECT_TRUE(h.ok() && h->Wait().ok()) << step;
    if (!h.ok()) return {};
    deltas.push_back(h->stats().chunks_delta);
    saved.push_back(w);
  }
  std::vector<float> out(w.size());
  (*ck)->ClearRegistrations();
  EXPECT_TRUE(
      (*ck)->Register({"w", "F32", {int64_t(out.size())}, out.data()}).ok());
  for (int64_t step = 1; step <= 7; ++step) {
    auto r = (*ck)->Load(step);
    EXPECT_TRUE(r.ok()) << step << ": " << r.status();
    EXPECT_EQ(std::memcmp(out.data(), saved[step - 1].data(), w.size() * 4), 0)
        << "step " << step;
  }
  return deltas;
}

TEST_F(IncrementalTest, ChainsAreCutByFullChunksWhereTheServerDoesNotRebase) {
  server::ServerOptions so;
  so.data_dir = dir_.path();
  so.listen = "127.0.0.1:0";
  so.rebase_deltas = false;
  auto server = server::Server::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  // full, delta, delta, full, delta, delta, full
  EXPECT_EQ(SaveDriftingSteps((*server)->grpc_address()),
            (std::vector<uint64_t>{0, 1, 1, 0, 1, 1, 0}));
  EXPECT_EQ((*server)->rebaser_stats().rebased, 0u);
}

TEST_F(IncrementalTest, ARebasingServerTakesDeltasOnEverySave) {
  server::ServerOptions so;
  so.data_dir = dir_.path();
  so.listen = "127.0.0.1:0";
  auto server = server::Server::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(SaveDriftingSteps((*server)->grpc_address()),
            (std::vector<uint64_t>{0, 1, 1, 1, 1, 1, 1}));
  (*server)->WaitRebased();
  // Each delta made its predecessor a delta of it.
  server::RebaserStats r = (*server)->rebaser_stats();
  EXPECT_EQ(r.rebased + r.keyframes, 6u);
  EXPECT_GE(r.rebased, 5u);
  EXPECT_EQ(r.failed, 0u);
}

// The record offsets of whole (not delta) chunk records in segment `path`.
std::vector<uint64_t> WholeRecords(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)),
                    std::istreambuf_iterator<char>());
  std::vector<uint64_t> whole;
  for (uint64_t off = 0; off + 64 <= bytes.size();) {
    if (bytes.compare(off, 4, "STGR") != 0) break;
    const uint8_t codec = static_cast<uint8_t>(bytes[off + 6]);
    uint64_t encoded = 0;
    std::memcpy(&encoded, &bytes[off + 32], 8);  // little-endian
    if (codec != 3 && codec != 4) whole.push_back(off);
    off += (64 + encoded + 4095) / 4096 * 4096;
  }
  return whole;
}

TEST_F(IncrementalTest, CorruptBaseFailsEveryDependentLoadWithDataLoss) {
  std::vector<float> w = Weights(4 * kChunk / 4, 19);
  {
    auto ck = Open();
    ASSERT_TRUE(ck->Register({"w", "F32", {int64_t(w.size())}, w.data()}).ok());
    ASSERT_TRUE(ck->Save(1)->Wait().ok());
    for (float& x : w) x += x * 1e-3f;
    auto h = ck->Save(2);
    ASSERT_TRUE(h->Wait().ok());
    ASSERT_EQ(h->stats().chunks_delta, 4u);
  }  // the embedded server stops with its last user, rebases done
  // The server keeps step 2 whole and step 1 as deltas of it: the last
  // whole records written are step 2's, rebased into a segment of their
  // own (step 1's whole versions, dead now, may still stand in an older
  // one). Corrupt the last one.
  std::string seg;
  std::vector<uint64_t> whole;
  for (const auto& e :
       std::filesystem::directory_iterator(dir_.path() + "/segments/incr")) {
    std::vector<uint64_t> found = WholeRecords(e.path().string());
    if (!found.empty() && e.path().string() > seg) {
      seg = e.path().string();
      whole = found;
    }
  }
  ASSERT_EQ(whole.size(), 4u) << "step 2's, rebased, in " << seg;
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << seg;
    f.seekg(whole.back() + 64 + 100);
    char c;
    f.read(&c, 1);
    c ^= 0x40;
    f.seekp(whole.back() + 64 + 100);
    f.write(&c, 1);
  }
  auto ck = Open();
  std::vector<float> out(w.size());
  ASSERT_TRUE(
      ck->Register({"w", "F32", {int64_t(out.size())}, out.data()}).ok());
  for (int64_t step : {1, 2}) {
    auto r = ck->Load(step);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << step;
  }
  auto r = ck->Load(1);
  EXPECT_NE(r.status().message().find("delta base"), std::string::npos)
      << r.status();
}

// A server that sends wrong bytes under intact checksums (a bug, a hostile
// peer, memory corrupted before the CRC was taken): the load hashes what
// it received against the chunk id. A raw payload is checked by that alone,
// also where it was received straight into the tensor (a stagger-server
// over UCX: ChunkIo::IntoDestination).
void FlipRawByteUnderGoodChecksums(const std::string& seg) {
  std::vector<uint64_t> whole = WholeRecords(seg);
  ASSERT_EQ(whole.size(), 1u);
  std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << seg;
  std::string rec(64 + kChunk, '\0');
  f.seekg(whole[0]);
  f.read(rec.data(), rec.size());
  ASSERT_EQ(rec[6], 0) << "a raw record";
  rec[64 + 100] ^= 0x40;
  const uint32_t payload_crc = format::Crc32c(rec.data() + 64, kChunk);
  std::memcpy(&rec[40], &payload_crc, 4);
  const uint32_t header_crc = format::Crc32c(rec.data(), 60);
  std::memcpy(&rec[60], &header_crc, 4);
  f.seekp(whole[0]);
  f.write(rec.data(), rec.size());
}

void ExpectHashMismatch(Checkpointer& ck, size_t floats) {
  std::vector<float> out(floats);
  ASSERT_TRUE(
      ck.Register({"w", "F32", {int64_t(out.size())}, out.data()}).ok());
  auto r = ck.Load(1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("do not match chunk id"),
            std::string::npos)
      << r.status();
}

TEST_F(IncrementalTest, RawBytesWithRecomputedChecksumsFailTheLoad) {
  std::vector<float> w = Weights(kChunk / 4, 31);
  {
    auto ck = Open("raw");
    ASSERT_TRUE(ck->Register({"w", "F32", {int64_t(w.size())}, w.data()}).ok());
    ASSERT_TRUE(ck->Save(1)->Wait().ok());
  }
  FlipRawByteUnderGoodChecksums(dir_.path() + "/segments/incr/00000001.seg");
  auto ck = Open("raw");
  ExpectHashMismatch(*ck, w.size());
}

// Through a stagger-server over UCX, with payloads by cma (the default on
// one host) and over tcp (a server that does no cma and a client whose UCX
// leaves cma out: UCX_CMA_MEMORY_INVALIDATE=n on both sides).
void RawBytesCheckedInPlace(const std::string& dir, bool cma) {
  struct Env {  // unset on every return
    explicit Env(bool set) {
      if (set) setenv("UCX_CMA_MEMORY_INVALIDATE", "n", 1);
    }
    ~Env() { unsetenv("UCX_CMA_MEMORY_INVALIDATE"); }
  } env(!cma);
  const std::vector<std::string> args =
      cma ? std::vector<std::string>{}
          : std::vector<std::string>{"--no-cross-memory"};
  auto open = [](const std::string& servers) {
    CheckpointerOptions o;
    o.servers = servers;
    o.job = "incr";
    o.chunk_size = kChunk;
    o.codec = CodecChoice::kRaw;
    auto ck = Checkpointer::Open(o);
    EXPECT_TRUE(ck.ok()) << ck.status();
    return ck.ok() ? std::move(*ck) : nullptr;
  };
  std::vector<float> w = Weights(kChunk / 4, 32);
  auto server = testutil::ServerProcess::Start(dir, args);
  ASSERT_TRUE(server.ok()) << server.status();
  {
    auto ck = open((*server)->grpc());
    ASSERT_NE(ck, nullptr);
    ASSERT_TRUE(ck->Register({"w", "F32", {int64_t(w.size())}, w.data()}).ok());
    ASSERT_TRUE(ck->Save(1)->Wait().ok());
    // Intact, the same load is bit-exact, over the path asked for.
    std::vector<float> out(w.size());
    auto fresh = open((*server)->grpc());
    ASSERT_TRUE(
        fresh->Register({"w", "F32", {int64_t(out.size())}, out.data()}).ok());
    ASSERT_TRUE(fresh->Load(1).ok());
    EXPECT_EQ(std::memcmp(out.data(), w.data(), w.size() * 4), 0);
    EXPECT_EQ(fresh->Metrics().servers_cross_memory, cma ? 1u : 0u);
  }
  EXPECT_EQ((*server)->Stop(SIGTERM), 0);
  FlipRawByteUnderGoodChecksums(dir + "/segments/incr/00000001.seg");
  auto again = testutil::ServerProcess::Start(dir, args);
  ASSERT_TRUE(again.ok()) << again.status();
  auto ck = open((*again)->grpc());
  ASSERT_NE(ck, nullptr);
  ExpectHashMismatch(*ck, w.size());
}

TEST_F(IncrementalTest, RawBytesReceivedIntoTheTensorAreCheckedThere) {
  RawBytesCheckedInPlace(dir_.path(), /*cma=*/true);
}

TEST_F(IncrementalTest, RawBytesOverTcpAreCheckedToo) {
  RawBytesCheckedInPlace(dir_.path(), /*cma=*/false);
}

TEST_F(IncrementalTest, GcBetweenSavesNeverBreaksAKeptStep) {
  CheckpointerOptions o;
  o.servers = "embedded:" + dir_.path();
  o.job = "gc";
  o.chunk_size = kChunk;
  o.delta_chain_max = 3;
  o.adaptive_codec = false;  // deltas on every save: chains for gc to keep
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok());
  auto resolved = client::ResolveServers(o.servers);  // same server
  ASSERT_TRUE(resolved.ok());
  std::vector<float> w = Weights(6 * kChunk / 4, 23);
  ASSERT_TRUE(
      (*ck)->Register({"w", "F32", {int64_t(w.size())}, w.data()}).ok());
  std::mt19937 rng(29);
  std::vector<std::vector<float>> saved;
  for (int step = 1; step <= 10; ++step) {
    for (int k = 0; k < 2; ++k) {
      size_t c = rng() % 6;
      for (size_t j = 0; j < kChunk / 4; ++j) w[c * kChunk / 4 + j] += 1e-4f;
    }
    auto h = (*ck)->Save(step);
    ASSERT_TRUE(h.ok() && h->Wait().ok()) << step;
    saved.push_back(w);
    if (step >= 4) {
      auto gc = testutil::RunProcess(
          {testutil::BinDir() + "/stagger", "--server", resolved->addresses,
           "gc", "--job", "gc", "--keep", "3", "--grace-s", "0"});
      ASSERT_EQ(gc.exit_code, 0) << gc.out;
      EXPECT_NE(gc.out.find("kept 3"), std::string::npos) << gc.out;
    }
  }
  auto steps = (*ck)->Steps(true);
  ASSERT_TRUE(steps.ok());
  std::vector<int64_t> left;
  for (const auto& s : *steps) left.push_back(s.step);
  EXPECT_EQ(left, (std::vector<int64_t>{8, 9, 10}));
  std::vector<float> out(w.size());
  (*ck)->ClearRegistrations();
  ASSERT_TRUE(
      (*ck)->Register({"w", "F32", {int64_t(out.size())}, out.data()}).ok());
  for (int64_t step : {8, 9, 10}) {
    auto r = (*ck)->Load(step);
    ASSERT_TRUE(r.ok()) << step << ": " << r.status();
    EXPECT_EQ(std::memcmp(out.data(), saved[step - 1].data(), w.size() * 4), 0)
        << "step " << step;
  }
  EXPECT_EQ((*ck)->Load(7).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace stagger
