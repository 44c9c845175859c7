// stagger-server --metrics-listen: the page scraped during and after a
// save agrees with what the save reports.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "metrics/http_exporter.h"
#include "metrics/text_format.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

// The value of the sample `name` (with exactly `labels`, "" for none) on a
// metrics page; -1 when it is missing.
double Sample(const std::string& page, const std::string& name,
              const std::string& labels = "") {
  return metrics::SampleValue(page, name, labels).value_or(-1);
}

TEST(ServerMetricsTest, ScrapedCountersMatchTheSave) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(
      dir.path() + "/data", {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = (*server)->metrics();
  ASSERT_FALSE(addr.empty());

  auto idle = metrics::HttpGet(addr, "/metrics");
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ(Sample(*idle, "stagger_server_written_bytes_total"), 0);
  EXPECT_GT(Sample(*idle, "stagger_server_disk_free_bytes"), 0);

  constexpr size_t kBytes = 12 << 20;
  std::vector<char> a(kBytes), b(kBytes / 3);
  testutil::FillPattern(a, 1);
  testutil::FillPattern(b, 2);
  CheckpointerOptions o;
  o.servers = (*server)->grpc();
  o.job = "scraped";
  o.codec = CodecChoice::kRaw;
  o.chunk_size = 1 << 20;
  o.rate_limit_Bps = 8 << 20;  // about two seconds: time to look inside
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE((*ck)->Register({"a", "U8", {int64_t(a.size())}, a.data()}).ok());
  ASSERT_TRUE((*ck)->Register({"b", "U8", {int64_t(b.size())}, b.data()}).ok());
  auto h = (*ck)->Save(1);
  ASSERT_TRUE(h.ok()) << h.status();
  // Scraped as soon as the first bytes are in (the rate cap keeps the rest
  // coming for seconds), not after a guessed sleep.
  Result<std::string> during = absl::UnknownError("not scraped");
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    during = metrics::HttpGet(addr, "/metrics");
    ASSERT_TRUE(during.ok()) << during.status();
    if (Sample(*during, "stagger_server_received_bytes_total") > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (std::chrono::steady_clock::now() < give_up);
  ASSERT_TRUE(h->Wait().ok()) << h->Wait();
  const SaveStats st = h->stats();
  auto after = metrics::HttpGet(addr, "/metrics");
  ASSERT_TRUE(after.ok()) << after.status();

  // Mid-save: some bytes in, not all, and no step complete yet.
  const double mid = Sample(*during, "stagger_server_received_bytes_total");
  EXPECT_GT(mid, 0);
  EXPECT_LT(mid, static_cast<double>(st.bytes_shipped));
  EXPECT_EQ(Sample(*during, "stagger_server_steps_completed_total"), 0);

  // After: exactly what the save shipped and committed.
  EXPECT_EQ(st.bytes_shipped, a.size() + b.size());  // raw, nothing unchanged
  EXPECT_EQ(Sample(*after, "stagger_server_received_bytes_total"),
            static_cast<double>(st.bytes_shipped));
  EXPECT_EQ(Sample(*after, "stagger_server_written_bytes_total"),
            static_cast<double>(st.bytes_shipped));
  EXPECT_EQ(Sample(*after, "stagger_server_chunks_written_total"),
            static_cast<double>(st.chunks));
  EXPECT_EQ(Sample(*after, "stagger_server_records_written_total"),
            static_cast<double>(st.chunks));
  EXPECT_EQ(Sample(*after, "stagger_server_shard_commits_total"), 1);
  // Every control-plane call counted by method: the save's one commit.
  EXPECT_EQ(Sample(*after, "stagger_server_control_calls_total",
                   "method=\"CommitShard\""),
            1);
  EXPECT_GE(
      Sample(*after, "stagger_server_control_calls_total", "method=\"Hello\""),
      1);
  EXPECT_EQ(Sample(*after, "stagger_server_steps_completed_total"), 1);
  EXPECT_EQ(Sample(*after, "stagger_server_puts_in_flight"), 0);
  EXPECT_EQ(Sample(*after, "stagger_server_io_requests_in_flight"), 0);
  EXPECT_EQ(Sample(*after, "stagger_server_verify_failures_total"), 0);
  // A first save: no previous version to rebase, keep or move.
  EXPECT_EQ(Sample(*after, "stagger_server_rebase_bases_moved_total"), 0);
  const double batches = Sample(*after, "stagger_server_commit_batches_total");
  EXPECT_GE(batches, 1);
  EXPECT_EQ(Sample(*after, "stagger_server_fsync_seconds_count"), batches);
  EXPECT_EQ(
      Sample(*after, "stagger_server_fsync_seconds_bucket", "le=\"+Inf\""),
      batches);
  EXPECT_EQ(Sample(*after, "stagger_server_ingest_grants_total",
                   "class=\"checkpoint\""),
            static_cast<double>(st.chunks));

  // A load reads every chunk back through the same counters.
  std::vector<char> a2(a.size()), b2(b.size());
  (*ck)->ClearRegistrations();
  ASSERT_TRUE(
      (*ck)->Register({"a", "U8", {int64_t(a2.size())}, a2.data()}).ok());
  ASSERT_TRUE(
      (*ck)->Register({"b", "U8", {int64_t(b2.size())}, b2.data()}).ok());
  ASSERT_TRUE((*ck)->Load(1).ok());
  EXPECT_EQ(a2, a);
  auto loaded = metrics::HttpGet(addr, "/metrics");
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(Sample(*loaded, "stagger_server_read_bytes_total"),
            static_cast<double>(st.bytes_shipped));
  EXPECT_EQ(Sample(*loaded, "stagger_server_chunks_read_total"),
            static_cast<double>(st.chunks));
  // The same bytes per job, and the standard families.
  const std::string job = "job=\"scraped\"";
  EXPECT_EQ(Sample(*loaded, "stagger_server_job_received_bytes_total", job),
            static_cast<double>(st.bytes_shipped));
  EXPECT_EQ(Sample(*loaded, "stagger_server_job_written_bytes_total", job),
            static_cast<double>(st.bytes_shipped));
  EXPECT_EQ(Sample(*loaded, "stagger_server_job_read_bytes_total", job),
            static_cast<double>(st.bytes_shipped));
  EXPECT_NE(loaded->find("stagger_build_info{component=\"server\",version="),
            std::string::npos);
  // The server holds at least its segment being written and RocksDB's
  // files open, and more than 12 MiB of buffers resident.
  EXPECT_GT(Sample(*loaded, "process_open_fds"), 5);
  EXPECT_GT(Sample(*loaded, "process_resident_memory_bytes"), 12 << 20);
}

TEST(ServerMetricsTest, AnAddressInUseStopsTheServerWithAClearError) {
  testutil::TempDir dir;
  auto first = testutil::ServerProcess::Start(
      dir.path() + "/one", {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(first.ok()) << first.status();
  // The second server cannot have the address: it says so and exits 1
  // instead of running without its metrics.
  testutil::RunResult second = testutil::RunProcess(
      {testutil::BinDir() + "/stagger-server", "--data", dir.path() + "/two",
       "--listen", "127.0.0.1:0", "--metrics-listen", (*first)->metrics()});
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.out.find("metrics: cannot listen on " + (*first)->metrics()),
            std::string::npos)
      << second.out;
}

}  // namespace
}  // namespace stagger
