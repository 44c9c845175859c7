// End to end: real stagger-server processes, several rank processes over
// UCX (UCX_TLS=sm,tcp), and the stagger CLI.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/testutil/pattern.h"
#include "tests/testutil/process.h"

namespace stagger::testutil {
namespace {

namespace fs = std::filesystem;

std::string Cli() { return BinDir() + "/stagger"; }
std::string RankBin() { return BinDir() + "/stagger-test-rank"; }

std::vector<std::string> RankArgs(const std::string& servers,
                                  const std::string& job, uint32_t rank,
                                  uint32_t world, const std::string& mode,
                                  const std::string& step,
                                  uint64_t kib = 3000) {
  return {RankBin(),
          "--servers",
          servers,
          "--job",
          job,
          "--rank",
          std::to_string(rank),
          "--world",
          std::to_string(world),
          "--mode",
          mode,
          "--step",
          step,
          "--kib",
          std::to_string(kib),
          "--chunk-size",
          "1048576"};
}

// Runs ranks [0, n) of `world` concurrently, each as its own process.
std::vector<RunResult> RunRanks(const std::string& servers,
                                const std::string& job, uint32_t n,
                                uint32_t world, const std::string& mode,
                                const std::string& step) {
  std::vector<RunResult> results(n);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      results[r] = RunProcess(RankArgs(servers, job, r, world, mode, step));
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

void ExpectAll(const std::vector<RunResult>& rs, const std::string& line) {
  for (size_t r = 0; r < rs.size(); ++r) {
    EXPECT_EQ(rs[r].exit_code, 0) << "rank " << r << ": " << rs[r].out;
    EXPECT_NE(rs[r].out.find(line), std::string::npos)
        << "rank " << r << ": " << rs[r].out;
  }
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  }
  return n;
}

TEST(IntegrationTest, FourRanksSaveLoadRestoreVerify) {
  TempDir dir;
  auto server = ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string s = (*server)->grpc();
  for (int step : {1, 2}) {
    ExpectAll(RunRanks(s, "job4", 4, 4, "save", std::to_string(step)),
              "ok step=" + std::to_string(step));
  }
  ExpectAll(RunRanks(s, "job4", 4, 4, "load", "latest"), "ok step=2");
  ExpectAll(RunRanks(s, "job4", 4, 4, "load", "1"), "ok step=1");

  RunResult ls =
      RunProcess({Cli(), "--server", s, "ls", "--job", "job4", "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.out;
  EXPECT_NE(ls.out.find("{\"step\":1,\"state\":\"complete\",\"world_size\":4,"
                        "\"ranks_committed\":4"),
            std::string::npos)
      << ls.out;
  EXPECT_NE(ls.out.find("{\"step\":2,\"state\":\"complete\""),
            std::string::npos);
  EXPECT_NE(ls.out.find(",\"new_bytes\":"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find(",\"new_bytes\":0,"), std::string::npos) << ls.out;

  RunResult verify = RunProcess(
      {Cli(), "--server", s, "verify", "--job", "job4", "--step", "2"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  EXPECT_NE(verify.out.find("all 16 chunks good"), std::string::npos)
      << verify.out;

  std::string out = dir.path() + "/restored";
  RunResult restore = RunProcess({Cli(), "--server", s, "restore", "--job",
                                  "job4", "--step", "latest", "--out", out});
  ASSERT_EQ(restore.exit_code, 0) << restore.out;
  for (uint32_t r = 0; r < 4; ++r) {
    std::string path = out + "/rank-0000" + std::to_string(r) + ".safetensors";
    std::ifstream f(path, std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    std::string bytes((std::istreambuf_iterator<char>(f)), {});
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | uint8_t(bytes[i]);
    ASSERT_LT(8 + hlen, bytes.size());
    std::string header = bytes.substr(8, hlen);
    EXPECT_NE(header.find("\"layer.weight\":{\"dtype\":\"F32\""),
              std::string::npos);
    // Tensors are written in manifest (name) order: bias, then weight.
    std::vector<char> bias(3000 * 1024 / 4), weight(3000 * 1024 * 3 / 4);
    FillPattern(bias, BiasSeed(r, 2));
    FillPattern(weight, WeightSeed(r, 2));
    std::string data = bytes.substr(8 + hlen);
    ASSERT_EQ(data.size(), bias.size() + weight.size());
    EXPECT_TRUE(std::equal(bias.begin(), bias.end(), data.begin()));
    EXPECT_TRUE(
        std::equal(weight.begin(), weight.end(), data.begin() + bias.size()));
  }
  EXPECT_EQ((*server)->Stop(SIGTERM), 0);  // clean exit on SIGTERM
}

TEST(IntegrationTest, StepIsInvisibleUntilEveryRankCommits) {
  TempDir dir;
  auto server = ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string s = (*server)->grpc();
  ExpectAll(RunRanks(s, "p", 2, 2, "save", "1"), "ok step=1");
  ExpectAll(RunRanks(s, "p", 1, 2, "save", "2"), "ok step=2");  // rank 0 only
  RunResult ls =
      RunProcess({Cli(), "--server", s, "ls", "--job", "p", "--json"});
  EXPECT_NE(ls.out.find("{\"step\":2,\"state\":\"partial\",\"world_size\":2,"
                        "\"ranks_committed\":1"),
            std::string::npos)
      << ls.out;
  ExpectAll(RunRanks(s, "p", 2, 2, "load", "latest"), "ok step=1");
  RunResult partial = RunProcess(RankArgs(s, "p", 0, 2, "load", "2"));
  EXPECT_EQ(partial.exit_code, 1);
  EXPECT_NE(partial.out.find("error NOT_FOUND"), std::string::npos)
      << partial.out;
  RunResult restore = RunProcess({Cli(), "--server", s, "restore", "--job", "p",
                                  "--step", "2", "--out", dir.path() + "/o"});
  EXPECT_EQ(restore.exit_code, 1);
  EXPECT_NE(restore.out.find("not complete"), std::string::npos);
}

TEST(IntegrationTest, BadInputGetsClearErrorsAndServerStaysUp) {
  TempDir dir;
  auto server = ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string s = (*server)->grpc();
  RunResult r = RunProcess(RankArgs(s, "j", 2, 2, "save", "1"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("error INVALID_ARGUMENT: rank 2 must be < world_size 2"),
            std::string::npos)
      << r.out;
  r = RunProcess(RankArgs(s, "bad/job", 0, 1, "save", "1"));
  EXPECT_NE(r.out.find("error INVALID_ARGUMENT: invalid job name 'bad/job'"),
            std::string::npos)
      << r.out;
  r = RunProcess(RankArgs(s, "j", 0, 1, "load", "9"));
  EXPECT_NE(r.out.find("error NOT_FOUND"), std::string::npos) << r.out;
  RunResult ls = RunProcess({Cli(), "--server", s, "ls", "--job", "a b"});
  EXPECT_EQ(ls.exit_code, 1);
  EXPECT_NE(ls.out.find("INVALID_ARGUMENT"), std::string::npos) << ls.out;
  RunResult step = RunProcess(
      {Cli(), "--server", s, "verify", "--job", "j", "--step", "-3"});
  EXPECT_EQ(step.exit_code, 2);  // a usage error
  EXPECT_NE(step.out.find("step must be 'latest' or a number"),
            std::string::npos)
      << step.out;
  // Still serving.
  ExpectAll(RunRanks(s, "j", 1, 1, "save", "1"), "ok step=1");
}

TEST(IntegrationTest, FlippedSegmentByteIsDetectedNeverReturned) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  auto server = ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  ExpectAll(RunRanks((*server)->grpc(), "c", 1, 1, "save", "1"), "ok step=1");
  EXPECT_EQ((*server)->Stop(SIGTERM), 0);

  // Flip one payload byte of the first record of the job's first segment.
  std::string seg;
  for (auto& e : fs::recursive_directory_iterator(data + "/segments")) {
    if (e.is_regular_file() && e.path().extension() == ".seg") {
      if (seg.empty() || e.path().string() < seg) seg = e.path().string();
    }
  }
  ASSERT_FALSE(seg.empty());
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(64 + 1000);
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(64 + 1000);
    f.write(&c, 1);
  }
  server = ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string s = (*server)->grpc();
  RunResult verify =
      RunProcess({Cli(), "--server", s, "verify", "--job", "c", "--step", "1"});
  EXPECT_EQ(verify.exit_code, 1) << verify.out;
  EXPECT_NE(verify.out.find("BAD rank 0 tensor '"), std::string::npos)
      << verify.out;
  EXPECT_NE(verify.out.find("DATA_LOSS"), std::string::npos) << verify.out;
  EXPECT_NE(verify.out.find("1 of 4 chunks bad"), std::string::npos)
      << verify.out;
  RunResult load = RunProcess(RankArgs(s, "c", 0, 1, "load", "1"));
  EXPECT_EQ(load.exit_code, 1) << load.out;
  EXPECT_NE(load.out.find("error DATA_LOSS"), std::string::npos) << load.out;
  RunResult restore = RunProcess({Cli(), "--server", s, "restore", "--job", "c",
                                  "--out", dir.path() + "/o"});
  EXPECT_EQ(restore.exit_code, 1);
  EXPECT_NE(restore.out.find("DATA_LOSS"), std::string::npos) << restore.out;
  EXPECT_FALSE(fs::exists(dir.path() + "/o/rank-00000.safetensors"));
}

TEST(IntegrationTest, SigkillDuringSaveKeepsLastCompleteStep) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  auto server = ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string s = (*server)->grpc();
  ExpectAll(RunRanks(s, "k", 2, 2, "save", "1"), "ok step=1");
  uint64_t before = DirBytes(data + "/segments");

  // A big step 2 from both ranks; kill the server once bytes are landing.
  std::vector<pid_t> ranks;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.push_back(Spawn(RankArgs(s, "k", r, 2, "save", "2", 150000)));
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (DirBytes(data + "/segments") < before + (8 << 20) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(DirBytes(data + "/segments"), before + (8 << 20));
  (*server)->Stop(SIGKILL);
  for (pid_t p : ranks) EXPECT_EQ(WaitExit(p), 1);  // the saves fail

  server = ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  s = (*server)->grpc();
  RunResult ls =
      RunProcess({Cli(), "--server", s, "ls", "--job", "k", "--json"});
  EXPECT_NE(ls.out.find("{\"step\":1,\"state\":\"complete\""),
            std::string::npos)
      << ls.out;
  EXPECT_EQ(ls.out.find("{\"step\":2,\"state\":\"complete\""),
            std::string::npos)
      << ls.out;
  ExpectAll(RunRanks(s, "k", 2, 2, "load", "latest"), "ok step=1");
  RunResult verify = RunProcess({Cli(), "--server", s, "verify", "--job", "k"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  // And the restarted server takes new saves.
  ExpectAll(RunRanks(s, "k", 2, 2, "save", "3"), "ok step=3");
  ExpectAll(RunRanks(s, "k", 2, 2, "load", "latest"), "ok step=3");
}

TEST(IntegrationTest, TrainingProcessKilledDuringBackgroundSave) {
  TempDir dir;
  auto server = ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string s = (*server)->grpc();
  ExpectAll(RunRanks(s, "d", 2, 2, "save", "1"), "ok step=1");
  // Both ranks take the step-2 snapshot and die while it drains.
  for (uint32_t r = 0; r < 2; ++r) {
    RunResult died =
        RunProcess(RankArgs(s, "d", r, 2, "save-and-die", "2", 100000));
    EXPECT_EQ(died.exit_code, -1) << died.out;  // killed by its signal
    EXPECT_NE(died.out.find("snapshot taken, dying"), std::string::npos)
        << died.out;
  }
  RunResult ls =
      RunProcess({Cli(), "--server", s, "ls", "--job", "d", "--json"});
  EXPECT_NE(ls.out.find("{\"step\":1,\"state\":\"complete\""),
            std::string::npos)
      << ls.out;
  EXPECT_EQ(ls.out.find("{\"step\":2,\"state\":\"complete\""),
            std::string::npos)
      << ls.out;
  ExpectAll(RunRanks(s, "d", 2, 2, "load", "latest"), "ok step=1");
}

TEST(IntegrationTest, ServerRetentionKeepsTheNewestSteps) {
  TempDir dir;
  auto server = ServerProcess::Start(dir.path() + "/data",
                                     {"--keep-last", "2", "--gc-grace-s", "0"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string s = (*server)->grpc();
  for (int step = 1; step <= 4; ++step) {
    ExpectAll(RunRanks(s, "r", 2, 2, "save", std::to_string(step)),
              "ok step=" + std::to_string(step));
  }
  RunResult ls =
      RunProcess({Cli(), "--server", s, "ls", "--job", "r", "--json"});
  EXPECT_EQ(ls.out.find("{\"step\":1,"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("{\"step\":2,"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("{\"step\":3,\"state\":\"complete\""),
            std::string::npos)
      << ls.out;
  EXPECT_NE(ls.out.find("{\"step\":4,\"state\":\"complete\""),
            std::string::npos)
      << ls.out;
  ExpectAll(RunRanks(s, "r", 2, 2, "load", "latest"), "ok step=4");
  ExpectAll(RunRanks(s, "r", 2, 2, "load", "3"), "ok step=3");
  RunResult gone = RunProcess(RankArgs(s, "r", 0, 2, "load", "1"));
  EXPECT_NE(gone.out.find("error NOT_FOUND"), std::string::npos) << gone.out;
  RunResult verify = RunProcess({Cli(), "--server", s, "verify", "--job", "r"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
}

TEST(IntegrationTest, GcCompactsSegmentsAndTheKeptStepStillLoads) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  // Small segments, so the steps spread over many sealed ones.
  auto server = ServerProcess::Start(
      data, {"--segment-mib", "2", "--compact-mib-per-s", "0"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string s = (*server)->grpc();
  for (int step = 1; step <= 4; ++step) {
    ExpectAll(RunRanks(s, "g", 2, 2, "save", std::to_string(step)),
              "ok step=" + std::to_string(step));
  }
  const uint64_t before = DirBytes(data + "/segments/g");
  RunResult gc = RunProcess({Cli(), "--server", s, "gc", "--job", "g", "--keep",
                             "1", "--grace-s", "0"});
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  EXPECT_NE(gc.out.find("deleted 3 steps [1,2,3], kept 1"), std::string::npos)
      << gc.out;
  EXPECT_NE(gc.out.find("compaction: removed "), std::string::npos) << gc.out;
  EXPECT_EQ(gc.out.find("still running"), std::string::npos) << gc.out;
  const uint64_t after = DirBytes(data + "/segments/g");
  // Three of four steps were dead: well over half the bytes go.
  EXPECT_LT(after, before / 2) << before << " -> " << after;

  ExpectAll(RunRanks(s, "g", 2, 2, "load", "latest"), "ok step=4");
  RunResult verify = RunProcess({Cli(), "--server", s, "verify", "--job", "g"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  EXPECT_NE(verify.out.find("all 8 chunks good"), std::string::npos)
      << verify.out;
  // And after a restart.
  EXPECT_EQ((*server)->Stop(SIGTERM), 0);
  server = ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  ExpectAll(RunRanks((*server)->grpc(), "g", 2, 2, "load", "latest"),
            "ok step=4");
}

TEST(IntegrationTest, GcFreesSpaceOnEveryServer) {
  TempDir dir;
  const std::vector<std::string> args = {"--segment-mib", "2",
                                         "--compact-mib-per-s", "0"};
  auto a = ServerProcess::Start(dir.path() + "/a", args);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = ServerProcess::Start(dir.path() + "/b", args);
  ASSERT_TRUE(b.ok()) << b.status();
  const std::string both = (*a)->grpc() + "," + (*b)->grpc();
  // Four ranks: 16 chunk slots, placed by rendezvous hashing over the two
  // servers' ports. With 2 ranks (8 slots) all of them fell on one server
  // in 1 run of 128, and this test had nothing to show on the other.
  for (int step = 1; step <= 4; ++step) {
    ExpectAll(RunRanks(both, "m", 4, 4, "save", std::to_string(step)),
              "ok step=" + std::to_string(step));
  }
  const uint64_t before_a = DirBytes(dir.path() + "/a/segments/m");
  const uint64_t before_b = DirBytes(dir.path() + "/b/segments/m");
  // Chunks are spread over both servers.
  ASSERT_GT(before_a, 0u);
  ASSERT_GT(before_b, 0u);

  RunResult gc = RunProcess({Cli(), "--server", both, "gc", "--job", "m",
                             "--keep", "1", "--grace-s", "0"});
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  EXPECT_NE(gc.out.find("deleted 3 steps [1,2,3], kept 1"), std::string::npos)
      << gc.out;
  EXPECT_NE(gc.out.find("on 2 servers"), std::string::npos) << gc.out;
  const uint64_t after_a = DirBytes(dir.path() + "/a/segments/m");
  const uint64_t after_b = DirBytes(dir.path() + "/b/segments/m");
  // Which chunk slots land on which server depends on the servers' ports;
  // a server holding few slots may have nothing sealed to compact yet.
  EXPECT_LE(after_a, before_a) << gc.out;
  EXPECT_LE(after_b, before_b) << gc.out;
  // Three of four steps were dead.
  EXPECT_LT(after_a + after_b, (before_a + before_b) * 6 / 10)
      << before_a << "+" << before_b << " -> " << after_a << "+" << after_b;

  ExpectAll(RunRanks(both, "m", 4, 4, "load", "latest"), "ok step=4");
  RunResult verify =
      RunProcess({Cli(), "--server", both, "verify", "--job", "m"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  EXPECT_NE(verify.out.find("all 16 chunks good"), std::string::npos)
      << verify.out;
  RunResult gone = RunProcess(RankArgs(both, "m", 0, 4, "load", "1"));
  EXPECT_NE(gone.out.find("error NOT_FOUND"), std::string::npos) << gone.out;

  // A gc given one server only (a wrong --server list) collects on that
  // server alone, by its own manifests: the coordinator deletes nothing
  // more, the other (no steps there) refuses and says to list every
  // server. The kept step survives.
  int refused = 0;
  for (const std::string& one : {(*a)->grpc(), (*b)->grpc()}) {
    RunResult r = RunProcess({Cli(), "--server", one, "gc", "--job", "m",
                              "--keep", "1", "--grace-s", "0"});
    if (r.exit_code == 0) {
      EXPECT_NE(r.out.find("deleted 0 steps"), std::string::npos) << r.out;
      continue;
    }
    ++refused;
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("if its steps are on servers not listed, list "
                         "every server of the job"),
              std::string::npos)
        << r.out;
  }
  EXPECT_EQ(refused, 1);
  ExpectAll(RunRanks(both, "m", 4, 4, "load", "latest"), "ok step=4");
}

}  // namespace
}  // namespace stagger::testutil
