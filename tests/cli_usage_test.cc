// The CLI as a new user meets it: exit codes (2 for a usage error, 1 for a
// failed operation), global flags on either side of the command, "did you
// mean" for a misspelled command or option, --version, and `ls` of a job
// that does not exist.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testutil/process.h"

namespace stagger {
namespace {

using testutil::RunProcess;
using testutil::RunResult;

std::string Cli() { return testutil::BinDir() + "/stagger"; }

TEST(CliUsageTest, UsageErrorsExit2AndSayWhatWasWrong) {
  RunResult r = RunProcess({Cli(), "restor", "--job", "j"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown command 'restor'; did you mean 'restore'?"),
            std::string::npos)
      << r.out;
  r = RunProcess({Cli(), "restore", "--job", "j", "--otu", "/tmp/x"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown option '--otu' for 'restore'; did you mean "
                       "'--out'?"),
            std::string::npos)
      << r.out;
  r = RunProcess({Cli()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("a command is required: ls, restore"), std::string::npos)
      << r.out;
  r = RunProcess({Cli(), "gc", "--job", "j", "--keep", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--keep: must be a whole number of steps, at least 1"),
            std::string::npos)
      << r.out;
  r = RunProcess({Cli(), "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("2 a usage error"), std::string::npos) << r.out;
  r = RunProcess({testutil::BinDir() + "/stagger-server", "--bogus"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("stagger-server: unknown option '--bogus'\n"),
            std::string::npos)
      << r.out;
  r = RunProcess({testutil::BinDir() + "/stagger-server", "--data", "/tmp/x",
                  "--segmnet-mib=4"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown option '--segmnet-mib'; did you mean "
                       "'--segment-mib'?"),
            std::string::npos)
      << r.out;
  // A bad number says what it is, in one short line.
  r = RunProcess({testutil::BinDir() + "/stagger-server", "--data", "/tmp/x",
                  "--gc-grace-s", "-1"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("stagger-server: --gc-grace-s: -1 is negative: give a "
                       "number >= 0\n"),
            std::string::npos)
      << r.out;
  EXPECT_LT(r.out.size(), 200u) << r.out;
  r = RunProcess({testutil::BinDir() + "/stagger-server", "--data", "/tmp/x",
                  "--partial-warn-s", "10m"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--partial-warn-s: 10m is not a number"),
            std::string::npos)
      << r.out;
  r = RunProcess(
      {Cli(), "import-dcp", "--dir", "d", "--job", "j", "--step", "-3"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--step: -3 is negative: give a number >= 0"),
            std::string::npos)
      << r.out;
}

// import-dcp and export-dcp hand over to stagger.torch.dcp in python3
// (torch >= 2.2, tested with it in tests/python/test_dtensor.py): here
// what they say before that and when no python can run it.
TEST(CliUsageTest, DcpCommandsSayWhatTheyNeed) {
  RunResult r = RunProcess({Cli(), "import-dcp", "--job", "j", "--dir", "d"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--step is required"), std::string::npos) << r.out;
  r = RunProcess({Cli(), "export-dcp", "--dir", "d"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--job is required"), std::string::npos) << r.out;
  setenv("STAGGER_PYTHON", "/nonexistent/python", 1);
  r = RunProcess({Cli(), "export-dcp", "--job", "j", "--dir", "d"});
  unsetenv("STAGGER_PYTHON");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot run /nonexistent/python"), std::string::npos)
      << r.out;
  // A python that runs but lacks numpy (-S: no site packages): one line
  // naming what it cannot import, no traceback.
  testutil::TempDir dir;
  const std::string python = dir.path() + "/python-without-numpy";
  {
    std::ofstream f(python);
    f << "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n";
  }
  std::filesystem::permissions(python, std::filesystem::perms::owner_all);
  setenv("STAGGER_PYTHON", python.c_str(), 1);
  r = RunProcess(
      {Cli(), "import-dcp", "--job", "j", "--dir", "d", "--step", "1"});
  unsetenv("STAGGER_PYTHON");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("stagger import-dcp: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot import 'numpy': set STAGGER_PYTHON to a python "
                       "with torch >= 2.2 and numpy"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("Traceback"), std::string::npos) << r.out;
}

TEST(CliUsageTest, VersionNamesTheFormatAndTheLibraries) {
  for (const std::string& bin :
       {Cli(), testutil::BinDir() + "/stagger-server"}) {
    RunResult r = RunProcess({bin, "--version"});
    EXPECT_EQ(r.exit_code, 0) << r.out;
    for (const char* want :
         {"(format 1)", "UCX 1.", "liburing 2.", "RocksDB 7.", "gRPC 1.",
          "protobuf 3.", "zstd 1."}) {
      EXPECT_NE(r.out.find(want), std::string::npos) << bin << ": " << r.out;
    }
  }
}

TEST(CliUsageTest, GlobalFlagsGoOnEitherSideAndAMissingJobExits1) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string s = (*server)->grpc();
  // --server (and --log-level) after the command.
  RunResult r = RunProcess(
      {Cli(), "ls", "--job", "typo", "--server", s, "--log-level", "error"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("job 'typo' has no steps on 1 server"),
            std::string::npos)
      << r.out;
  r = RunProcess({Cli(), "--server", s, "ls", "--job", "typo", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("\"steps\":[]"), std::string::npos) << r.out;
  // A failed operation is 1, not a usage error.
  r = RunProcess({Cli(), "show", "--job", "typo", "--server", s});
  EXPECT_EQ(r.exit_code, 1) << r.out;
}

TEST(CliUsageTest, AServerSaysWhyItCannotStart) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string bin = testutil::BinDir() + "/stagger-server";
  // The same --data: the first server holds it.
  RunResult r = RunProcess(
      {bin, "--data", dir.path() + "/data", "--listen", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("is in use by another stagger-server (PID " +
                       std::to_string((*server)->pid()) + ","),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("LOCK"), std::string::npos) << r.out;
  // Its port: one clear line, no gRPC error tree.
  r = RunProcess(
      {bin, "--data", dir.path() + "/other", "--listen", (*server)->grpc()});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot listen for gRPC on " + (*server)->grpc()),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("chttp2"), std::string::npos) << r.out;
  // The failed start leaves no data directory it created behind; the one
  // in use keeps everything, and a clean stop takes its PID file along.
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/other"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/data/meta"));
  const std::string pid_file = dir.path() + "/data/stagger-server.pid";
  EXPECT_TRUE(std::filesystem::exists(pid_file));
  EXPECT_EQ((*server)->Stop(SIGTERM), 0);
  EXPECT_FALSE(std::filesystem::exists(pid_file));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/data/meta"));
}

// A single-process job checkpointing to embedded:DIR: the CLI opens DIR
// itself, and says who holds it while a server does.
TEST(CliUsageTest, TheCliOpensAnEmbeddedDirectory) {
  testutil::TempDir dir;
  const std::string data = dir.path() + "/data";
  // The demo writes through a server of its own on DIR; its job keeps the
  // name it was given.
  RunResult r = RunProcess({Cli(), "--server", "embedded:" + data, "demo",
                            "--job", "mine", "--ranks", "2", "--steps", "2",
                            "--mib-per-rank", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("stagger demo: job mine,"), std::string::npos) << r.out;
  r = RunProcess(
      {Cli(), "--server", "embedded:" + data, "ls", "--job", "mine", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"step\":2,\"state\":\"complete\""), std::string::npos)
      << r.out;
  r = RunProcess({Cli(), "jobs", "--server", "embedded:" + data});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("mine "), std::string::npos) << r.out;
  // The same demo again: its first save is refused, saying why.
  r = RunProcess({Cli(), "--server", "embedded:" + data, "demo", "--job",
                  "mine", "--ranks", "1", "--steps", "1", "--mib-per-rank",
                  "1"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("job 'mine' already has step 1 of rank 0"),
            std::string::npos)
      << r.out;
  // While a server holds DIR, the CLI names it.
  auto server = testutil::ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  r = RunProcess(
      {Cli(), "--server", "embedded:" + data, "ls", "--job", "mine"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("in use by another stagger-server (PID " +
                       std::to_string((*server)->pid())),
            std::string::npos)
      << r.out;
  r = RunProcess({Cli(), "--server", "embedded:", "ls", "--job", "mine"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("needs a directory"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace stagger
