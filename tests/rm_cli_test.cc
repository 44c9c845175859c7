// `stagger rm`, `stagger jobs` and what `gc` says of its grace period, as
// an operator runs them: a real stagger-server process, Checkpointers on
// default options, the CLI as a process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "stagger/checkpointer.h"
#include "tests/testutil/process.h"

namespace stagger {
namespace {

using testutil::RunProcess;
using testutil::RunResult;
using testutil::ServerProcess;
using testutil::TempDir;

class RmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = ServerProcess::Start(dir_.path() + "/data");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  RunResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(),
                {testutil::BinDir() + "/stagger", "--server", server_->grpc()});
    return RunProcess(args);
  }

  // Saves steps 1..n of `job`: 4 MiB of floats, each step a small update
  // of every value, so that every chunk after the first step is a delta.
  std::unique_ptr<Checkpointer> SaveSteps(const std::string& job, int n) {
    CheckpointerOptions o;
    o.servers = server_->grpc();
    o.job = job;
    auto ck = Checkpointer::Open(o);
    EXPECT_TRUE(ck.ok()) << ck.status();
    if (!ck.ok()) return nullptr;
    state_.assign(1 << 20, 0.0f);
    for (size_t i = 0; i < state_.size(); ++i) {
      state_[i] = 0.01f * std::sin(static_cast<float>(i));
    }
    EXPECT_TRUE((*ck)
                    ->Register({"w",
                                "F32",
                                {static_cast<int64_t>(state_.size())},
                                state_.data()})
                    .ok());
    for (int step = 1; step <= n; ++step) {
      if (step > 1) {
        for (float& x : state_) x *= 1.0001f;
      }
      saved_.push_back(state_);
      auto h = (*ck)->Save(step);
      EXPECT_TRUE(h.ok()) << h.status();
      if (h.ok()) {
        EXPECT_TRUE(h->Wait().ok()) << step;
      }
    }
    return std::move(*ck);
  }

  // Loads `step` of `job` with a fresh Checkpointer; true when it comes
  // back bit-exact as saved.
  bool LoadsBack(const std::string& job, int step) {
    CheckpointerOptions o;
    o.servers = server_->grpc();
    o.job = job;
    auto ck = Checkpointer::Open(o);
    if (!ck.ok()) return false;
    std::vector<float> out(state_.size());
    if (!(*ck)
             ->Register(
                 {"w", "F32", {static_cast<int64_t>(out.size())}, out.data()})
             .ok()) {
      return false;
    }
    auto got = (*ck)->Load(step);
    if (!got.ok()) {
      ADD_FAILURE() << "step " << step << ": " << got.status();
      return false;
    }
    return std::memcmp(out.data(), saved_[step - 1].data(),
                       out.size() * sizeof(float)) == 0;
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::vector<float> state_;
  std::vector<std::vector<float>> saved_;
};

TEST_F(RmTest, DeletedStepsAreGoneAndTheOthersStillLoad) {
  auto ck = SaveSteps("r", 4);
  ASSERT_NE(ck, nullptr);
  ck.reset();
  // The newest step: the others are deltas of its chunks (the server keeps
  // the newest version whole), so they must keep what they need.
  RunResult rm = Cli({"rm", "--job", "r", "--step", "4", "--grace-s", "0"});
  ASSERT_EQ(rm.exit_code, 0) << rm.out;
  EXPECT_NE(rm.out.find("deleted 1 step [4], kept 3"), std::string::npos)
      << rm.out;
  // Two at once, the oldest among them.
  rm =
      Cli({"rm", "--job", "r", "--step", "1", "--step", "3", "--grace-s", "0"});
  ASSERT_EQ(rm.exit_code, 0) << rm.out;
  EXPECT_NE(rm.out.find("deleted 2 steps [1,3], kept 1"), std::string::npos)
      << rm.out;
  EXPECT_TRUE(LoadsBack("r", 2));
  RunResult ls = Cli({"ls", "--job", "r", "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.out;
  EXPECT_NE(ls.out.find("\"step\":2"), std::string::npos) << ls.out;
  for (const char* gone : {"\"step\":1", "\"step\":3", "\"step\":4"}) {
    EXPECT_EQ(ls.out.find(gone), std::string::npos) << gone << ls.out;
  }

  // A step that is not there deletes nothing and says which steps are.
  rm = Cli({"rm", "--job", "r", "--step", "2", "--step", "9"});
  EXPECT_EQ(rm.exit_code, 1) << rm.out;
  EXPECT_NE(rm.out.find("NOT_FOUND"), std::string::npos) << rm.out;
  EXPECT_NE(rm.out.find("has no step 9"), std::string::npos) << rm.out;
  EXPECT_NE(rm.out.find("(steps: 2)"), std::string::npos) << rm.out;
  EXPECT_TRUE(LoadsBack("r", 2));

  // All of it: the job is gone from `jobs` and from the disk.
  RunResult jobs = Cli({"jobs", "--json"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.out;
  EXPECT_NE(jobs.out.find("{\"job\":\"r\",\"steps\":1,\"partial\":0,"
                          "\"latest\":2,"),
            std::string::npos)
      << jobs.out;
  rm = Cli({"rm", "--job", "r", "--all", "--grace-s", "0"});
  ASSERT_EQ(rm.exit_code, 0) << rm.out;
  EXPECT_NE(rm.out.find("deleted 1 step [2], kept 0"), std::string::npos)
      << rm.out;
  jobs = Cli({"jobs", "--json"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.out;
  EXPECT_EQ(jobs.out.find("\"job\":\"r\""), std::string::npos) << jobs.out;
  uint64_t left = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(
           dir_.path() + "/data/segments/r")) {
    if (e.is_regular_file()) left += e.file_size();
  }
  EXPECT_EQ(left, 0u) << rm.out;
  EXPECT_EQ(Cli({"ls", "--job", "r"}).exit_code, 1);
}

TEST_F(RmTest, UsageErrorsExitTwoAndDeleteNothing) {
  auto ck = SaveSteps("u", 1);
  ASSERT_NE(ck, nullptr);
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"rm", "--job", "u"},
           {"rm", "--job", "u", "--step", "1", "--all"},
           {"rm", "--job", "u", "--step", "latest"},
           {"rm", "--job", "u", "--step", "-1"},
           {"rm", "--job", "u", "--all", "--grace-s", "-5"},
       }) {
    RunResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.out;
  }
  EXPECT_TRUE(LoadsBack("u", 1));
}

TEST_F(RmTest, GcSaysWhatTheGracePeriodKept) {
  auto ck = SaveSteps("g", 3);
  ASSERT_NE(ck, nullptr);
  // Default grace (600 s): steps 1 and 2 go, their chunks were written
  // seconds ago and stay.
  RunResult gc = Cli({"gc", "--job", "g", "--keep", "1"});
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  EXPECT_NE(gc.out.find("deleted 2 steps [1,2], kept 1; freed 0 chunks"),
            std::string::npos)
      << gc.out;
  EXPECT_NE(gc.out.find("grace: kept "), std::string::npos) << gc.out;
  EXPECT_NE(gc.out.find("written in the last 600 s; a gc after "),
            std::string::npos)
      << gc.out;
  // Without the grace they go.
  gc = Cli({"gc", "--job", "g", "--keep", "1", "--grace-s", "0"});
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  EXPECT_EQ(gc.out.find("grace: kept"), std::string::npos) << gc.out;
  EXPECT_EQ(gc.out.find("freed 0 chunks"), std::string::npos) << gc.out;
  EXPECT_TRUE(LoadsBack("g", 3));
}

// A job with chunks and no step (a first save stopped before its commit;
// here its only step deleted within the grace period): gc cannot tell
// what is live and says so, naming the bytes; rm --all deletes them.
TEST_F(RmTest, AJobWithChunksAndNoStepIsDeletedByRmAll) {
  auto ck = SaveSteps("orphan", 1);
  ASSERT_NE(ck, nullptr);
  RunResult r = Cli({"rm", "--job", "orphan", "--step", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("grace: kept "), std::string::npos) << r.out;
  r = Cli({"gc", "--job", "orphan", "--keep", "1", "--grace-s", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("NOT_FOUND: job 'orphan' has no steps on the 1 server "
                       "listed ("),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("'stagger rm --job orphan --all' deletes them"),
            std::string::npos)
      << r.out;
  // `jobs` says whose bytes they are.
  r = Cli({"jobs"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("job 'orphan': its "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" bytes belong to no step (a save that never "
                       "committed, or steps removed within the grace period); "
                       "'stagger rm --job orphan --all' deletes them"),
            std::string::npos)
      << r.out;
  r = Cli({"jobs", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t at = r.out.find("\"job\":\"orphan\"");
  ASSERT_NE(at, std::string::npos) << r.out;
  const size_t disk = r.out.find("\"disk_bytes\":", at);
  const size_t none = r.out.find("\"bytes_in_no_step\":", at);
  ASSERT_NE(disk, std::string::npos) << r.out;
  ASSERT_NE(none, std::string::npos) << r.out;
  EXPECT_GT(std::stoull(r.out.substr(disk + 13)), 0u) << r.out;
  EXPECT_EQ(std::stoull(r.out.substr(disk + 13)),
            std::stoull(r.out.substr(none + 19)))
      << r.out;
  r = Cli({"rm", "--job", "orphan", "--all", "--grace-s", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("deleted 0 steps [], kept 0; freed "), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("freed 0 chunks"), std::string::npos) << r.out;
  r = Cli({"rm", "--job", "orphan", "--all", "--grace-s", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("has no steps and no chunks"), std::string::npos)
      << r.out;
  // A job nobody ever saved: gc and rm both say so, exit 1.
  r = Cli({"gc", "--job", "never", "--keep", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("nothing to collect"), std::string::npos) << r.out;
}

// A script run twice with the same job name: the second run's save of a
// step the first committed is refused at Save(), before a byte is copied
// or shipped, saying how to go on; after `stagger rm` of it, it saves.
TEST_F(RmTest, SavingACommittedStepAgainIsRefusedAtSave) {
  auto first = SaveSteps("twice", 2);
  ASSERT_NE(first, nullptr);
  // The same Checkpointer, again.
  auto again = first->Save(2);
  ASSERT_EQ(again.status().code(), absl::StatusCode::kAborted)
      << again.status();
  EXPECT_NE(again.status().message().find("by this process"), std::string::npos)
      << again.status();
  first.reset();

  CheckpointerOptions o;
  o.servers = server_->grpc();
  o.job = "twice";
  auto second = Checkpointer::Open(o);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE((*second)
                  ->Register({"w",
                              "F32",
                              {static_cast<int64_t>(state_.size())},
                              state_.data()})
                  .ok());
  auto h = (*second)->Save(1);
  ASSERT_EQ(h.status().code(), absl::StatusCode::kAborted) << h.status();
  const std::string message(h.status().message());
  EXPECT_NE(message.find("job 'twice' already has step 1 of rank 0"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("stagger rm --job twice --step 1"), std::string::npos)
      << message;
  // Nothing went out: the step is as the first run saved it.
  EXPECT_EQ((*second)->Metrics().saves, 0u);
  EXPECT_TRUE(LoadsBack("twice", 1));
  // A new step saves; so does the old one once deleted.
  auto next = (*second)->Save(3);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->Wait().ok());
  RunResult rm = Cli({"rm", "--job", "twice", "--step", "1"});
  ASSERT_EQ(rm.exit_code, 0) << rm.out;
  second->reset();
  auto third = Checkpointer::Open(o);
  ASSERT_TRUE(third.ok()) << third.status();
  ASSERT_TRUE((*third)
                  ->Register({"w",
                              "F32",
                              {static_cast<int64_t>(state_.size())},
                              state_.data()})
                  .ok());
  auto redo = (*third)->Save(1);
  ASSERT_TRUE(redo.ok()) << redo.status();
  EXPECT_TRUE(redo->Wait().ok());
}

}  // namespace
}  // namespace stagger
