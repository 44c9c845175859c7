// Many ranks in one process against a server whose control plane runs few
// threads at once (stagger-server --control-threads 4): every rank opens
// and saves in the same moment, calls the server refuses as busy are
// repeated, and no save fails; the step is complete and loads bit-exact.
// The ranks share the process's data connection and thread pools.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
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

// A TCP proxy on 127.0.0.1 that holds each accepted connection for
// `delay` before it connects to `upstream` and passes bytes both ways: a
// server whose host is too busy to answer a handshake at once.
class DelayProxy {
 public:
  DelayProxy(uint16_t upstream, absl::Duration delay)
      : upstream_(upstream), delay_(delay) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        ::listen(listener_, 64) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    threads_.emplace_back([this] { Accept(); });
  }
  ~DelayProxy() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    for (auto& t : threads_) t.join();
    ::close(listener_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_; }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int c = ::accept(listener_, nullptr, nullptr);
      if (c < 0) continue;
      ++accepted_;
      threads_.emplace_back([this, c] { Pump(c); });
    }
  }
  void Pump(int c) {
    absl::SleepFor(delay_);
    int u = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(upstream_);
    if (::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      pollfd fds[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
      char buf[16384];
      while (!stop_) {
        if (::poll(fds, 2, 100) <= 0) continue;
        bool closed = false;
        for (int i = 0; i < 2; ++i) {
          if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
          ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
          if (n <= 0 || ::write(fds[1 - i].fd, buf, n) != n) closed = true;
        }
        if (closed) break;
      }
    }
    ::close(u);
    ::close(c);
  }

  const uint16_t upstream_;
  const absl::Duration delay_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<std::thread> threads_;  // Accept's and the pumps
};

// A control plane that takes longer to finish its handshake than the
// channel's connect timeout (250 ms; hundreds of ranks starting at once on
// a busy host) is waited for: the Checkpointer opens and saves. A port
// nobody listens on still fails at once.
TEST(ManyRanksTest, OpensThroughAControlPlaneSlowToHandshake) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/s");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string grpc = (*server)->grpc();
  const auto port =
      static_cast<uint16_t>(std::stoi(grpc.substr(grpc.rfind(':') + 1)));
  CheckpointerOptions o;
  o.job = "slow";
  std::string gone;
  {
    DelayProxy proxy(port, absl::Milliseconds(700));
    o.servers = proxy.address();
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_GE(proxy.accepted(), 1);
    std::vector<char> state(4096);
    testutil::FillPattern(state, 3);
    ASSERT_TRUE((*ck)->Register({"w", "U8", {4096}, state.data()}).ok());
    auto h = (*ck)->Save(1);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE(h->Wait().ok());
    gone = proxy.address();
  }
  // Nothing listens on the proxy's port once it is gone.
  o.servers = gone;
  const auto start = std::chrono::steady_clock::now();
  auto refused = Checkpointer::Open(o);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_FALSE(refused.ok());
  EXPECT_LT(took, 5.0) << refused.status();
}

}  // namespace
}  // namespace stagger
