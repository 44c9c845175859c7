#include "cold_tier_util.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "metrics/http_exporter.h"
#include "testutil/pattern.h"

namespace stagger::testutil {

double Sample(const std::string& page, const std::string& name) {
  std::smatch m;
  const std::regex re("(^|\n)" + name + " ([0-9.e+-]+)\n");
  return std::regex_search(page, m, re) ? std::stod(m[2]) : -1;
}

std::string WaitDrained(ServerProcess& server, double steps, double timeout_s) {
  std::string page;
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    auto got = metrics::HttpGet(server.metrics(), "/metrics");
    if (got.ok()) {
      page = *got;
      if (Sample(page, "stagger_server_drain_steps_total") >= steps &&
          Sample(page, "stagger_server_drain_steps_behind") == 0) {
        return page;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "not drained within " << timeout_s << " s:\n" << page;
  return page;
}

std::unique_ptr<Checkpointer> OpenJob(const std::string& servers,
                                      const std::string& job,
                                      CodecChoice codec) {
  CheckpointerOptions o;
  o.servers = servers;
  o.job = job;
  o.chunk_size = 1 << 20;
  o.codec = codec;
  auto ck = Checkpointer::Open(o);
  EXPECT_TRUE(ck.ok()) << ck.status();
  return ck.ok() ? std::move(*ck) : nullptr;
}

namespace {

// `stagger ls --job J --json` on `server`: its output, a test failure
// when it fails.
std::string LsJson(ServerProcess& server, const std::string& job) {
  auto ls = RunProcess({BinDir() + "/stagger", "--server", server.grpc(), "ls",
                        "--job", job, "--json"});
  EXPECT_EQ(ls.exit_code, 0) << ls.out;
  return ls.out;
}

}  // namespace

void ExpectLoads(ServerProcess& server, const std::string& job, int64_t step,
                 const std::vector<char>& want) {
  auto ck = OpenJob(server.grpc(), job);
  ASSERT_NE(ck, nullptr);
  std::vector<char> out(want.size(), 0);
  ASSERT_TRUE(
      ck->Register({"w", "U8", {int64_t(out.size())}, out.data()}).ok());
  auto loaded = ck->Load(step);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, step);
  EXPECT_TRUE(out == want) << "step " << step << " of job " << job;
}

void ExpectDataLossNaming(ServerProcess& server, const std::string& job,
                          size_t bytes, const std::string& object) {
  auto ck = OpenJob(server.grpc(), job);
  ASSERT_NE(ck, nullptr);
  std::vector<char> out(bytes);
  ASSERT_TRUE(
      ck->Register({"w", "U8", {int64_t(out.size())}, out.data()}).ok());
  auto loaded = ck->Load(1);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss)
      << loaded.status();
  EXPECT_NE(loaded.status().message().find(object), std::string::npos)
      << loaded.status();
}

void RoundTripThroughTheTier(const StartTierServer& start,
                             const std::string& dir, const std::string& job) {
  auto a = start(dir + "/a");
  ASSERT_NE(a, nullptr);
  std::vector<char> w(6 << 20), b(3 << 20 | 12345);
  std::vector<std::vector<char>> saved_w, saved_b;
  {
    auto ck = OpenJob(a->grpc(), job);
    ASSERT_NE(ck, nullptr);
    ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    ASSERT_TRUE(ck->Register({"b", "U8", {int64_t(b.size())}, b.data()}).ok());
    FillPattern(w, 1);
    FillPattern(b, 2);
    for (int64_t step = 1; step <= 2; ++step) {
      if (step == 2) {
        for (size_t i = 0; i < w.size(); i += 4096) w[i] ^= 0x5a;
      }
      auto h = ck->Save(step);
      ASSERT_TRUE(h.ok()) << h.status();
      ASSERT_TRUE(h->Wait().ok()) << h->Wait();
      saved_w.push_back(w);
      saved_b.push_back(b);
    }
  }
  const std::string page = WaitDrained(*a, 2);
  EXPECT_GT(Sample(page, "stagger_server_drain_bytes_total"), 0);
  std::string ls = LsJson(*a, job);
  EXPECT_NE(ls.find("\"step\":2,"), std::string::npos) << ls;
  EXPECT_NE(ls.find("\"tiers\":[\"disk\",\"cold\"],\"level\":\"disk\"}]"),
            std::string::npos)
      << ls;
  a->Stop(SIGTERM);
  std::filesystem::remove_all(dir + "/a");

  auto fresh = start(dir + "/fresh");
  ASSERT_NE(fresh, nullptr);
  auto ck = OpenJob(fresh->grpc(), job);
  ASSERT_NE(ck, nullptr);
  auto steps = ck->Steps(false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 2u);
  // Held by the tier alone now.
  ls = LsJson(*fresh, job);
  EXPECT_NE(ls.find("\"tiers\":[\"cold\"],\"level\":\"disk\"}]"),
            std::string::npos)
      << ls;
  for (int64_t step : {2, 1}) {
    std::vector<char> lw(w.size(), 0), lb(b.size(), 0);
    ck->ClearRegistrations();
    ASSERT_TRUE(
        ck->Register({"w", "U8", {int64_t(lw.size())}, lw.data()}).ok());
    ASSERT_TRUE(
        ck->Register({"b", "U8", {int64_t(lb.size())}, lb.data()}).ok());
    auto loaded = ck->Load(step);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(*loaded, step);
    EXPECT_TRUE(lw == saved_w[step - 1]) << "w of step " << step;
    EXPECT_TRUE(lb == saved_b[step - 1]) << "b of step " << step;
  }
}

}  // namespace stagger::testutil
