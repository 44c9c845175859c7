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

}  // namespace
}  // namespace stagger
