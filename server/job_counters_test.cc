#include "server/job_counters.h"

#include <gtest/gtest.h>

#include <string>

namespace stagger::server {
namespace {

TEST(JobCountersTest, RowsPerJobUpToTheCapThenOneForTheRest) {
  JobCounters c;
  const size_t jobs = JobCounters::kMaxJobs + 5;
  for (size_t i = 0; i < jobs; ++i) {
    const std::string job = "j" + std::to_string(i);
    c.AddReceived(job, 10);
    c.AddWritten(job, 7);
    c.AddRead(job, 1);
  }
  c.AddReceived("j0", 5);  // an early job keeps its own row
  auto rows = c.Snapshot();
  ASSERT_EQ(rows.size(), JobCounters::kMaxJobs + 1);
  EXPECT_EQ(rows["j0"].received, 15u);
  EXPECT_EQ(rows["j0"].written, 7u);
  EXPECT_EQ(rows["j0"].read, 1u);
  const JobBytes& other = rows[JobCounters::kOtherJobs];
  EXPECT_EQ(other.received, 50u);  // the five past the cap
  EXPECT_EQ(other.written, 35u);
  EXPECT_EQ(other.read, 5u);
  EXPECT_EQ(rows.count("j" + std::to_string(jobs - 1)), 0u);
}

}  // namespace
}  // namespace stagger::server
