#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <iomanip>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "metrics/histogram.h"
#include "metrics/http_exporter.h"
#include "metrics/process.h"
#include "metrics/text_format.h"

namespace stagger::metrics {
namespace {

TEST(HistogramTest, CountsIntoCumulativeBuckets) {
  Histogram h({0.001, 0.01, 0.1});
  for (double s : {0.0005, 0.001, 0.002, 0.05, 0.5, 3.0}) h.Observe(s);
  Histogram::Snapshot snap = h.Take();
  ASSERT_EQ(snap.cumulative.size(), 3u);
  EXPECT_EQ(snap.cumulative[0], 2u);  // 0.0005 and 0.001 (le is inclusive)
  EXPECT_EQ(snap.cumulative[1], 3u);
  EXPECT_EQ(snap.cumulative[2], 4u);
  EXPECT_EQ(snap.count, 6u);
  EXPECT_NEAR(snap.sum, 3.5535, 1e-6);
}

// Two counters of one family (one label value needing escapes), a gauge and
// a histogram.
TextWriter ExamplePage() {
  TextWriter w;
  w.Counter("x_total", "things done", 3, {{"job", "a\"b\\c\nd"}});
  w.Counter("x_total", "things done", 4.5, {{"job", "e"}});
  w.Gauge("y", "a level", 0.25);
  Histogram h({0.5});
  h.Observe(0.25);
  h.Observe(2);
  w.Histogram("z_seconds", "how long", h.Take());
  return w;
}

TEST(TextWriterTest, WritesFamiliesOnceAndEscapesLabels) {
  TextWriter w = ExamplePage();
  EXPECT_EQ(w.text(),
            "# HELP x_total things done\n"
            "# TYPE x_total counter\n"
            "x_total{job=\"a\\\"b\\\\c\\nd\"} 3\n"
            "x_total{job=\"e\"} 4.5\n"
            "# HELP y a level\n"
            "# TYPE y gauge\n"
            "y 0.25\n"
            "# HELP z_seconds how long\n"
            "# TYPE z_seconds histogram\n"
            "z_seconds_bucket{le=\"0.5\"} 1\n"
            "z_seconds_bucket{le=\"+Inf\"} 2\n"
            "z_seconds_sum 2.25\n"
            "z_seconds_count 2\n");
}

TEST(StandardFamiliesTest, BuildInfoAndThisProcess) {
  // Some memory of our own, touched, and a file descriptor held.
  std::vector<char> ballast(32 << 20, 1);
  const int fd = ::dup(1);
  ASSERT_GE(fd, 0);
  TextWriter w;
  WriteStandardFamilies(w, "server", "9.8.7", 3);
  const std::string page = w.text();
  ::close(fd);
  EXPECT_EQ(*SampleValue(page, "stagger_build_info",
                         "component=\"server\",version=\"9.8.7\",format="
                         "\"3\""),
            1);
  auto rss = SampleValue(page, "process_resident_memory_bytes");
  ASSERT_TRUE(rss.ok()) << page;
  EXPECT_GT(*rss, static_cast<double>(ballast.size()));
  // The ballast is an allocation the process holds (glibc's allocator
  // counts it; AddressSanitizer's, which replaces it, does not).
  auto heap = SampleValue(page, "stagger_heap_in_use_bytes");
  ASSERT_TRUE(heap.ok()) << page;
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_GE(*heap, static_cast<double>(ballast.size()));
#endif
  auto vsize = SampleValue(page, "process_virtual_memory_bytes");
  ASSERT_TRUE(vsize.ok()) << page;
  EXPECT_GE(*vsize, *rss);
  auto fds = SampleValue(page, "process_open_fds");
  ASSERT_TRUE(fds.ok()) << page;
  EXPECT_GE(*fds, 4);  // stdin, stdout, stderr and the dup
  auto max_fds = SampleValue(page, "process_max_fds");
  ASSERT_TRUE(max_fds.ok()) << page;
  EXPECT_GE(*max_fds, *fds);
  // This test process started moments ago (minutes at most). The boot
  // time it is computed from is whole seconds, and a VM's wall clock drifts
  // from its boot clock: a minute of slack either way.
  auto start = SampleValue(page, "process_start_time_seconds");
  ASSERT_TRUE(start.ok()) << page;
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(*start, now + 60) << std::fixed << *start << " vs now " << now;
  EXPECT_GE(*start, now - 900) << std::fixed << *start << " vs now " << now;
  EXPECT_TRUE(SampleValue(page, "process_cpu_seconds_total").ok()) << page;
  EXPECT_NE(page.find("# TYPE process_cpu_seconds_total counter"),
            std::string::npos);
}

TEST(SampleValueTest, ReadsBackWhatTheWriterWrote) {
  const std::string page = ExamplePage().text();
  EXPECT_EQ(*SampleValue(page, "x_total", "job=\"e\""), 4.5);
  EXPECT_EQ(*SampleValue(page, "y"), 0.25);
  EXPECT_EQ(*SampleValue(page, "z_seconds_sum"), 2.25);
  // Neither the labelled samples nor a longer name are the sample asked.
  for (const char* name : {"x_total", "x", "z_seconds"}) {
    auto missing = SampleValue(page, name);
    ASSERT_FALSE(missing.ok()) << name;
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(missing.status().message().find(name), std::string::npos);
  }
  auto garbled = SampleValue("y 1.5.5\n", "y");
  ASSERT_FALSE(garbled.ok());
  EXPECT_EQ(garbled.status().code(), absl::StatusCode::kInvalidArgument);
}

// Sends `request` as is and returns the whole answer.
std::string RawExchange(const std::string& address,
                        const std::string& request) {
  const size_t colon = address.rfind(':');
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(colon + 1), &port));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::send(fd, request.data(), request.size(), 0),
            static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, n);
  ::close(fd);
  return out;
}

TEST(HttpExporterTest, ServesMetricsAndRefusesEverythingElse) {
  std::atomic<int> scrapes{0};
  auto e = HttpExporter::Start(
      "127.0.0.1:0", [&] { return absl::StrCat("scrapes ", ++scrapes, "\n"); });
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string addr = (*e)->address();
  EXPECT_NE(addr, "127.0.0.1:0");
  auto page = HttpGet(addr, "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(*page, "scrapes 1\n");
  EXPECT_EQ(*HttpGet(addr, "/metrics?x=1"), "scrapes 2\n");
  auto missing = HttpGet(addr, "/other");
  EXPECT_NE(missing.status().message().find("404"), std::string::npos)
      << missing.status();
  EXPECT_EQ(RawExchange(addr, "POST /metrics HTTP/1.1\r\n\r\n").substr(0, 12),
            "HTTP/1.1 405");
  EXPECT_EQ(RawExchange(addr, "hello\r\n\r\n").substr(0, 12), "HTTP/1.1 400");
  EXPECT_EQ(RawExchange(addr, std::string(9000, 'a')).substr(0, 12),
            "HTTP/1.1 431");
  EXPECT_EQ(scrapes.load(), 2);
}

TEST(HttpExporterTest, BadAddressesAreNamed) {
  auto none = HttpExporter::Start("no-port", [] { return ""; });
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no-port"), std::string::npos);
  auto bad_port = HttpExporter::Start("127.0.0.1:70000", [] { return ""; });
  EXPECT_EQ(bad_port.status().code(), absl::StatusCode::kInvalidArgument);
  auto first = HttpExporter::Start("127.0.0.1:0", [] { return ""; });
  ASSERT_TRUE(first.ok());
  auto taken = HttpExporter::Start((*first)->address(), [] { return ""; });
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace stagger::metrics
