// Many ranks in one process against a server whose control plane runs few
// threads at once (stagger-server --control-threads 4): every rank opens
// and saves in the same moment, calls the server refuses as busy are
// repeated, and no save fails; the step is complete and loads bit-exact.
// The ranks share the process's data connection and thread pools.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/server_set.h"
#include "stagger/checkpointer.h"
#include "tests/testutil/pattern.h"
#include "tests/testutil/process.h"

namespace stagger {
namespace {

constexpr uint32_t kRanks = 48;

// Threads of this process whose name starts with `prefix`.
int ThreadsNamed(const std::string& prefix) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    std::getline(comm, name);
    n += name.rfind(prefix, 0) == 0;
  }
  return n;
}

TEST(ManyRanksTest, AllRanksAtOnceAgainstFewControlThreads) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/s",
                                               {"--control-threads", "4"});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::vector<char>> state(kRanks, std::vector<char>(4096));
  std::vector<std::unique_ptr<Checkpointer>> cks(kRanks);
  std::vector<Status> saved(kRanks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      testutil::FillPattern(state[r], r + 1);
      CheckpointerOptions o;
      o.servers = (*server)->grpc();
      o.job = "many";
      o.rank = r;
      o.world_size = kRanks;
      o.chunk_size = 4096;
      auto ck = Checkpointer::Open(o);
      if (!ck.ok()) {
        saved[r] = ck.status();
        return;
      }
      cks[r] = std::move(*ck);
      saved[r] = cks[r]->Register({"w", "U8", {4096}, state[r].data()});
      if (!saved[r].ok()) return;
      auto h = cks[r]->Save(1);
      saved[r] = h.ok() ? h->Wait() : h.status();
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(saved[r].ok()) << "rank " << r << ": " << saved[r];
  }
  // How many calls the server refused as busy and the ranks repeated.
  ::testing::Test::RecordProperty("busy_retries",
                                  std::to_string(client::BusyRetries()));
  std::printf("calls repeated after a busy answer: %llu\n",
              static_cast<unsigned long long>(client::BusyRetries()));
  // The ranks share one data connection to the server (one UCX progress
  // thread) and one pool of each kind, not one per rank.
  EXPECT_EQ(ThreadsNamed("stagger-ucx-cli"), 1);
  EXPECT_LE(ThreadsNamed("stg-encode"), 8);
  EXPECT_LE(ThreadsNamed("stg-fetch"), 16);
  auto steps = cks[0]->Steps(false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ((*steps)[0].step, 1);
  EXPECT_TRUE((*steps)[0].complete);
  EXPECT_EQ((*steps)[0].ranks_committed, kRanks);
  // Each rank's bytes come back into its zeroed tensor.
  for (uint32_t r = 0; r < kRanks; r += 7) {
    std::vector<char> want = state[r];
    std::fill(state[r].begin(), state[r].end(), 0);
    auto loaded = cks[r]->Load(kLatestStep);
    ASSERT_TRUE(loaded.ok()) << "rank " << r << ": " << loaded.status();
    EXPECT_EQ(*loaded, 1);
    EXPECT_EQ(state[r], want) << "rank " << r;
  }
}

// 512 ranks, each a slice of two rows of one global tensor, save a step
// at once with default options; a new job of 256 ranks (four rows each)
// loads it bit-exact, every rank its own Checkpointer.
TEST(ManyRanksTest, FiveHundredTwelveSaveAndTwoHundredFiftySixLoad) {
  constexpr uint32_t kSavers = 512, kLoaders = 256, kCols = 16;
  constexpr uint32_t kRows = 2 * kSavers;
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/s");
  ASSERT_TRUE(server.ok()) << server.status();
  auto value = [](uint32_t row, uint32_t col) {
    return static_cast<float>(row) * 100.0f + static_cast<float>(col);
  };
  auto open = [&](uint32_t rank, uint32_t world) {
    CheckpointerOptions o;
    o.servers = (*server)->grpc();
    o.job = "wide";
    o.rank = rank;
    o.world_size = world;
    return Checkpointer::Open(o);
  };
  // Registers rows [first, first + rows) of the global tensor, backed by
  // `data`.
  auto rows_of = [&](std::vector<float>& data, uint32_t first, uint32_t rows) {
    data.resize(size_t{rows} * kCols);
    TensorSpec t{"w", "F32", {int64_t{rows}, int64_t{kCols}}, data.data()};
    t.global_shape = {int64_t{kRows}, int64_t{kCols}};
    t.global_offset = {int64_t{first}, 0};
    return t;
  };
  {
    std::vector<std::unique_ptr<Checkpointer>> cks;
    std::vector<std::vector<float>> data(kSavers);
    for (uint32_t r = 0; r < kSavers; ++r) {
      auto ck = open(r, kSavers);
      ASSERT_TRUE(ck.ok()) << "rank " << r << ": " << ck.status();
      TensorSpec t = rows_of(data[r], 2 * r, 2);
      for (uint32_t i = 0; i < 2 * kCols; ++i) {
        data[r][i] = value(2 * r + i / kCols, i % kCols);
      }
      ASSERT_TRUE((*ck)->Register(t).ok());
      cks.push_back(std::move(*ck));
    }
    std::vector<SaveHandle> handles;
    for (auto& ck : cks) {
      auto h = ck->Save(1);
      ASSERT_TRUE(h.ok()) << h.status();
      handles.push_back(std::move(*h));
    }
    for (uint32_t r = 0; r < kSavers; ++r) {
      Status s = handles[r].Wait();
      ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s;
    }
    auto steps = cks[0]->Steps(false);
    ASSERT_TRUE(steps.ok()) << steps.status();
    ASSERT_EQ(steps->size(), 1u);
    EXPECT_TRUE((*steps)[0].complete);
    EXPECT_EQ((*steps)[0].ranks_committed, kSavers);
  }
  // The loaders, on 4 threads of 64 ranks each.
  std::vector<std::string> failures(kLoaders);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t q = t; q < kLoaders; q += 4) {
        auto ck = open(q, kLoaders);
        if (!ck.ok()) {
          failures[q] = ck.status().ToString();
          continue;
        }
        std::vector<float> data;
        Status s = (*ck)->Register(rows_of(data, 4 * q, 4));
        std::fill(data.begin(), data.end(), -1.0f);
        auto loaded = s.ok() ? (*ck)->Load(kLatestStep) : Result<int64_t>(s);
        if (!loaded.ok()) {
          failures[q] = loaded.status().ToString();
          continue;
        }
        for (uint32_t i = 0; i < 4 * kCols; ++i) {
          if (data[i] != value(4 * q + i / kCols, i % kCols)) {
            failures[q] = "element " + std::to_string(i) + " differs";
            break;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t q = 0; q < kLoaders; ++q) {
    EXPECT_EQ(failures[q], "") << "loader rank " << q;
  }
}

}  // namespace
}  // namespace stagger
