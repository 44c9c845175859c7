#include "qos/cpu_share.h"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "util/executor.h"

namespace stagger::qos {
namespace {

namespace fs = std::filesystem;

TEST(CpuShareTest, ParsesCgroupV2CpuMax) {
  EXPECT_DOUBLE_EQ(*ParseCpuMax("max 100000\n"), 0.0);
  EXPECT_DOUBLE_EQ(*ParseCpuMax("150000 100000\n"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseCpuMax("50000 100000"), 0.5);
  Result<double> bad = ParseCpuMax("lots 100000");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'lots 100000'"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(ParseCpuMax("").ok());
  EXPECT_FALSE(ParseCpuMax("0 100000").ok());
}

TEST(CpuShareTest, ParsesCgroupV1Quota) {
  EXPECT_DOUBLE_EQ(*ParseCfsQuota("-1\n", "100000\n"), 0.0);
  EXPECT_DOUBLE_EQ(*ParseCfsQuota("200000", "100000"), 2.0);
  EXPECT_EQ(ParseCfsQuota("-5", "100000").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseCfsQuota("100", "0").ok());
}

class CgroupTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("stagger-cgroup-" + std::to_string(getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  fs::path root_;
};

TEST_F(CgroupTreeTest, V2TakesTheSmallestQuotaOfTheCgroupAndItsAncestors) {
  Write("job/cpu.max", "300000 100000\n");
  Write("job/rank0/cpu.max", "max 100000\n");
  Write("job/rank0/trainer/cpu.max", "max 100000\n");
  EXPECT_DOUBLE_EQ(CgroupQuotaCores("0::/job/rank0/trainer\n", root_), 3.0);
  Write("job/rank0/cpu.max", "150000 100000\n");
  EXPECT_DOUBLE_EQ(CgroupQuotaCores("0::/job/rank0/trainer\n", root_), 1.5);
}

TEST_F(CgroupTreeTest, V2WithoutAQuotaOrFilesIsNoLimit) {
  Write("a/cpu.max", "max 100000\n");
  EXPECT_DOUBLE_EQ(CgroupQuotaCores("0::/a\n", root_), 0.0);
  EXPECT_DOUBLE_EQ(CgroupQuotaCores("0::/not/there\n", root_), 0.0);
  EXPECT_DOUBLE_EQ(CgroupQuotaCores("", root_), 0.0);
  EXPECT_DOUBLE_EQ(CgroupQuotaCores("garbage\n", root_), 0.0);
}

TEST_F(CgroupTreeTest, V1ReadsTheCpuControllersHierarchy) {
  Write("cpu,cpuacct/slurm/job7/cpu.cfs_quota_us", "400000\n");
  Write("cpu,cpuacct/slurm/job7/cpu.cfs_period_us", "100000\n");
  const std::string cgroup =
      "12:memory:/slurm/job7\n"
      "4:cpu,cpuacct:/slurm/job7\n"
      "1:name=systemd:/init.scope\n";
  EXPECT_DOUBLE_EQ(CgroupQuotaCores(cgroup, root_), 4.0);
}

TEST(CpuShareTest, CoresAreTheNarrowestLimitSplitAmongLocalRanks) {
  EXPECT_EQ(CombineCpuShare(64, 0, 8).cores, 8);
  EXPECT_EQ(CombineCpuShare(64, 6.5, 1).cores, 6);
  EXPECT_EQ(CombineCpuShare(4, 16, 1).cores, 4);
  EXPECT_EQ(CombineCpuShare(2, 0, 8).cores, 1);  // never 0
  EXPECT_EQ(CombineCpuShare(0, 0, 0).cores, 1);
  CpuShare s = CombineCpuShare(16, 12, 3);
  EXPECT_EQ(s.cores, 4);
  EXPECT_EQ(s.affinity_cores, 16);
  EXPECT_DOUBLE_EQ(s.quota_cores, 12);
  EXPECT_EQ(s.local_ranks, 3);
}

TEST(CpuShareTest, ReadFollowsTheAffinityMaskAndLocalWorldSize) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  if (CPU_COUNT(&saved) < 2) GTEST_SKIP() << "one CPU: no narrower mask";
  // Narrow this thread's mask to one CPU (sched_getaffinity(0) reads the
  // calling thread's), as taskset would.
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const char* old = std::getenv("LOCAL_WORLD_SIZE");
  std::string kept = old ? old : "";
  unsetenv("LOCAL_WORLD_SIZE");
  CpuShare narrow = ReadCpuShare();
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  CpuShare shared = ReadCpuShare();
  if (old) {
    setenv("LOCAL_WORLD_SIZE", kept.c_str(), 1);
  } else {
    unsetenv("LOCAL_WORLD_SIZE");
  }
  EXPECT_EQ(narrow.affinity_cores, 1);
  EXPECT_EQ(narrow.cores, 1);
  EXPECT_EQ(shared.affinity_cores, CPU_COUNT(&saved));
  EXPECT_EQ(shared.local_ranks, 2);
}

TEST(CpuShareTest, LoweredThreadIsSchedIdleWithIdleIo) {
  BackgroundPriority got = BackgroundPriority::kNormal;
  int tid = 0;
  Result<ThreadSched> sched = absl::UnknownError("unset");
  std::thread t([&] {
    got = LowerThisThread();
    tid = ThisThreadId();
    sched = ReadThreadSched(tid);
  });
  t.join();
  ASSERT_TRUE(sched.ok()) << sched.status();
  // Lowering one's own priority needs no privilege on Linux.
  EXPECT_EQ(got, BackgroundPriority::kIdle);
  EXPECT_EQ(sched->policy, SCHED_IDLE);
  EXPECT_EQ(sched->io_class, 3);
  // The calling thread is untouched.
  Result<ThreadSched> me = ReadThreadSched(ThisThreadId());
  ASSERT_TRUE(me.ok());
  EXPECT_EQ(me->policy, SCHED_OTHER);
  EXPECT_EQ(ReadThreadSched(tid).status().code(), absl::StatusCode::kNotFound);
}

TEST(CpuShareTest, ExecutorRunsItsThreadInitAndNamesItsThreads) {
  Executor e(3, "stg-test", [] { LowerThisThread(); });
  std::vector<int> tids = e.thread_ids();
  ASSERT_EQ(tids.size(), 3u);
  for (int tid : tids) {
    Result<ThreadSched> s = ReadThreadSched(tid);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->policy, SCHED_IDLE) << "thread " << tid;
    std::ifstream comm("/proc/self/task/" + std::to_string(tid) + "/comm");
    std::string name;
    std::getline(comm, name);
    EXPECT_EQ(name, "stg-test");
  }
}

}  // namespace
}  // namespace stagger::qos
