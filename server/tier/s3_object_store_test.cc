// S3ObjectStore's retries against a scripted HTTP endpoint on loopback
// (no S3 behind it: the replies are what a throttled or failing store
// sends). tests/s3_test.cc runs the store against radosgw.
#include "server/tier/s3_object_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/testutil/process.h"

namespace stagger::server::tier {
namespace {

// Answers each request on 127.0.0.1 with the next of `replies` (the last
// one again once they run out), closing the connection after each.
class ScriptedEndpoint {
 public:
  explicit ScriptedEndpoint(std::vector<std::string> replies)
      : replies_(std::move(replies)) {
    fd_ = testutil::ListenLoopback(&port_);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedEndpoint() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }
  int requests() const { return requests_; }
  // The request lines ("PUT /bucket/key?partNumber=1&uploadId=u HTTP/1.1")
  // in order.
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> l(mu_);
    return lines_;
  }
  // The request heads (line and headers), in order.
  std::vector<std::string> heads() {
    std::lock_guard<std::mutex> l(mu_);
    return heads_;
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      // Reads the request head and a body of Content-Length bytes.
      std::string in;
      char buf[65536];
      size_t want = std::string::npos;
      while (true) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 2000) <= 0) break;
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        in.append(buf, n);
        const size_t head = in.find("\r\n\r\n");
        if (head == std::string::npos) continue;
        if (want == std::string::npos) {
          size_t at = in.find("Content-Length: ");
          if (at == std::string::npos) at = in.find("content-length: ");
          want = head + 4 +
                 (at == std::string::npos || at > head
                      ? 0
                      : std::stoull(in.substr(at + 16)));
        }
        if (in.size() >= want) break;
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        lines_.push_back(in.substr(0, in.find("\r\n")));
        heads_.push_back(in.substr(0, in.find("\r\n\r\n")));
      }
      const int i = requests_++;
      const std::string& r = replies_[std::min<size_t>(i, replies_.size() - 1)];
      (void)!::write(c, r.data(), r.size());
      ::close(c);
    }
  }

  std::vector<std::string> replies_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::vector<std::string> lines_;
  std::vector<std::string> heads_;
  std::thread thread_;
};

std::string Reply(int status, const std::string& extra_headers,
                  const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + extra_headers + "\r\n" + body;
}

const std::string kSlowDown =
    "<Error><Code>SlowDown</Code><Message>Reduce your request rate."
    "</Message></Error>";

std::unique_ptr<S3ObjectStore> Store(const std::string& url, double timeout_s) {
  S3Options o;
  o.endpoint = url;
  o.bucket = "bucket";
  o.timeout_s = timeout_s;
  o.env = {{"AWS_ACCESS_KEY_ID", "K"}, {"AWS_SECRET_ACCESS_KEY", "S"}};
  auto s = S3ObjectStore::Open(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// Throttled twice (503 SlowDown, Retry-After: 1), then taken: the PUT
// succeeds, after waiting out the store's Retry-After each time.
TEST(S3ObjectStoreTest, SlowDownIsWaitedOutAsRetryAfterSays) {
  ScriptedEndpoint ep({Reply(503, "Retry-After: 1\r\n", kSlowDown),
                       Reply(503, "Retry-After: 1\r\n", kSlowDown),
                       Reply(200, "", "")});
  auto store = Store(ep.url(), 30);
  ASSERT_NE(store, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = store->Put({"job", "chunk.1"}, std::string(100000, 'x'));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(ep.requests(), 3);
  EXPECT_GE(took, 2.0);
}

// A store that keeps answering 500 or 429: retried with backoff until the
// budget, then UNAVAILABLE saying what it answered.
TEST(S3ObjectStoreTest, FailuresPastTheBudgetAreUnavailable) {
  ScriptedEndpoint ep({Reply(500, "",
                             "<Error><Code>InternalError</Code>"
                             "</Error>"),
                       Reply(429, "", kSlowDown)});
  auto store = Store(ep.url(), 1.5);
  ASSERT_NE(store, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  auto got = store->Get({"job", "chunk.1"});
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable)
      << got.status();
  EXPECT_NE(got.status().message().find("SlowDown"), std::string::npos)
      << got.status();
  EXPECT_GE(ep.requests(), 3);  // 50, 100, 200 ms... apart
  EXPECT_LT(ep.requests(), 20);
  EXPECT_LT(took, 3.0);
}

// 403 is never repeated; 412 to a conditional create means "exists".
TEST(S3ObjectStoreTest, RefusalsAreNotRepeatedAndPreconditionMeansExists) {
  ScriptedEndpoint denied(
      {Reply(403, "", "<Error><Code>InvalidAccessKeyId</Code></Error>")});
  auto store = Store(denied.url(), 30);
  ASSERT_NE(store, nullptr);
  Status s = store->Put({"job", "x"}, "y");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("InvalidAccessKeyId"), std::string::npos) << s;
  EXPECT_NE(s.message().find("'bucket'"), std::string::npos) << s;
  EXPECT_EQ(denied.requests(), 1);

  ScriptedEndpoint exists({Reply(412, "", "")});
  store = Store(exists.url(), 30);
  ASSERT_NE(store, nullptr);
  auto created = store->PutNew({"job", "x"}, "y");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE(*created);
}

const std::string kExpired =
    "<Error><Code>ExpiredToken</Code><Message>The provided token has "
    "expired.</Message></Error>";

// A credentials file with temporary credentials (a session token).
std::string WriteCredentials(const std::string& dir, const std::string& token) {
  const std::string path = dir + "/credentials";
  FILE* f = fopen(path.c_str(), "w");
  fprintf(f,
          "[default]\naws_access_key_id = K\naws_secret_access_key = S\n"
          "aws_session_token = %s\n",
          token.c_str());
  fclose(f);
  return path;
}

// Temporary credentials expire under a long-running server: S3 answers
// 400 ExpiredToken. With the credentials file refreshed meanwhile, the
// request is sent once more with the new token and succeeds; with the
// file unchanged, it is PERMISSION_DENIED at once (no retry storm),
// naming the bucket and the token.
TEST(S3ObjectStoreTest, AnExpiredSessionTokenIsReloadedFromTheFileOnce) {
  char tmpl[] = "/tmp/s3-credentials-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string file = WriteCredentials(tmpl, "first");
  S3Options o;
  o.bucket = "bucket";
  o.timeout_s = 30;
  o.env = {{"AWS_SHARED_CREDENTIALS_FILE", file}};

  ScriptedEndpoint refreshed({Reply(400, "", kExpired), Reply(200, "", "")});
  o.endpoint = refreshed.url();
  auto store = S3ObjectStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  WriteCredentials(tmpl, "second");
  Status s = (*store)->Put({"job", "x"}, "y");
  EXPECT_TRUE(s.ok()) << s;
  const std::vector<std::string> heads = refreshed.heads();
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_NE(heads[0].find("x-amz-security-token: first"), std::string::npos);
  EXPECT_NE(heads[1].find("x-amz-security-token: second"), std::string::npos);

  ScriptedEndpoint stale({Reply(400, "", kExpired)});
  o.endpoint = stale.url();
  store = S3ObjectStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  s = (*store)->Put({"job", "x"}, "y");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("'bucket'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("ExpiredToken"), std::string::npos) << s;
  EXPECT_NE(s.message().find("session token may have expired"),
            std::string::npos)
      << s;
  EXPECT_EQ(stale.requests(), 1);
  unlink(file.c_str());
  rmdir(tmpl);
}

// ListObjectsV2 pages are followed by their continuation token.
TEST(S3ObjectStoreTest, ListingFollowsContinuationTokens) {
  ScriptedEndpoint ep(
      {Reply(200, "",
             "<ListBucketResult><Contents><Key>p/job/a</Key></Contents>"
             "<IsTruncated>true</IsTruncated><NextContinuationToken>t+1/="
             "</NextContinuationToken></ListBucketResult>"),
       Reply(200, "",
             "<ListBucketResult><Contents><Key>p/job/b&amp;c</Key>"
             "</Contents><IsTruncated>false</IsTruncated>"
             "</ListBucketResult>")});
  S3Options o;
  o.endpoint = ep.url();
  o.bucket = "bucket";
  o.prefix = "p";
  o.env = {{"AWS_ACCESS_KEY_ID", "K"}, {"AWS_SECRET_ACCESS_KEY", "S"}};
  auto store = S3ObjectStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  auto keys = (*store)->List("job", "");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (std::vector<std::string>{"a", "b&c"}));
  EXPECT_EQ(ep.requests(), 2);
}

// An object above the part size goes as a multipart upload: started,
// parts of part_bytes each, completed with their ETags; a part refused
// aborts the upload.
TEST(S3ObjectStoreTest, LargeObjectsGoInPartsAndAFailedPartAborts) {
  const std::string started =
      "<InitiateMultipartUploadResult><UploadId>u/1</UploadId>"
      "</InitiateMultipartUploadResult>";
  ScriptedEndpoint ep(
      {Reply(200, "", started), Reply(200, "ETag: \"e1\"\r\n", ""),
       Reply(200, "ETag: \"e2\"\r\n", ""), Reply(200, "ETag: \"e3\"\r\n", ""),
       Reply(200, "", "<CompleteMultipartUploadResult/>")});
  S3Options o;
  o.endpoint = ep.url();
  o.bucket = "bucket";
  o.part_bytes = 5 << 20;
  o.env = {{"AWS_ACCESS_KEY_ID", "K"}, {"AWS_SECRET_ACCESS_KEY", "S"}};
  auto store = S3ObjectStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put({"job", "big"}, std::string(12 << 20, 'x')).ok());
  const std::vector<std::string> lines = ep.lines();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "POST /bucket/job/big?uploads= HTTP/1.1");
  EXPECT_EQ(lines[1],
            "PUT /bucket/job/big?partNumber=1&uploadId=u%2F1 HTTP/1.1");
  EXPECT_EQ(lines[3],
            "PUT /bucket/job/big?partNumber=3&uploadId=u%2F1 HTTP/1.1");
  EXPECT_EQ(lines[4], "POST /bucket/job/big?uploadId=u%2F1 HTTP/1.1");

  ScriptedEndpoint refused(
      {Reply(200, "", started), Reply(200, "ETag: \"e1\"\r\n", ""),
       Reply(403, "", "<Error><Code>AccessDenied</Code></Error>"),
       Reply(204, "", "")});
  o.endpoint = refused.url();
  store = S3ObjectStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  Status s = (*store)->Put({"job", "big"}, std::string(12 << 20, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  const std::vector<std::string> tried = refused.lines();
  ASSERT_EQ(tried.size(), 4u);
  EXPECT_EQ(tried[3], "DELETE /bucket/job/big?uploadId=u%2F1 HTTP/1.1");
}

TEST(S3ObjectStoreTest, BadOptionsAreRefusedNamingThem) {
  S3Options o;
  o.env = {{"AWS_ACCESS_KEY_ID", "K"}, {"AWS_SECRET_ACCESS_KEY", "S"}};
  o.bucket = "bucket";
  o.endpoint = "s3.amazonaws.com";
  auto r = S3ObjectStore::Open(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("s3.amazonaws.com"), std::string::npos);
  o.endpoint = "https://host/bucket";
  r = S3ObjectStore::Open(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  o.endpoint = "https://host";
  o.bucket = "Bad_Bucket";
  r = S3ObjectStore::Open(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("Bad_Bucket"), std::string::npos);
}

}  // namespace
}  // namespace stagger::server::tier
