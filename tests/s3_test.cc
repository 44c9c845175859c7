// The durable tier on S3, against a real S3 endpoint: Ceph's radosgw on a
// one-node cluster (scripts/ceph-cluster.sh start, then rgw), a bucket made
// for the run. Steps drained to the bucket load bit-exact from a new
// server on an empty --data; a damaged object is caught naming it; the
// store's own calls, refused credentials, a missing bucket and an endpoint
// that is down give the errors documented in server/tier/s3_object_store.h.
// Real processes throughout. Every test skips, saying why, where the
// cluster or radosgw cannot start (scripts/install-deps.sh installs them).
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cold_tier_util.h"
#include "gtest/gtest.h"
#include "metrics/http_exporter.h"
#include "server/tier/s3_object_store.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

using server::tier::ObjectName;
using server::tier::S3ObjectStore;
using server::tier::S3Options;

constexpr char kBucket[] = "ckpt";

// PUT of the bucket itself, signed as the store signs (the store never
// makes buckets: an operator does). Its HTTP status, 0 when no answer.
long CreateBucket(const std::string& endpoint, const std::string& key,
                  const std::string& secret) {
  CURL* h = curl_easy_init();
  const std::string url = endpoint + "/" + kBucket;
  const std::string user = key + ":" + secret;
  curl_slist* headers =
      curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
  curl_easy_setopt(h, CURLOPT_USERPWD, user.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
  long status = 0;
  if (curl_easy_perform(h) == CURLE_OK) {
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(h);
  return status;
}

// The cluster and its radosgw, shared by every test of the binary.
class Endpoint : public ::testing::Environment {
 public:
  static Endpoint* Get() { return instance_; }
  void SetUp() override {
    instance_ = this;
    dir_ = std::make_unique<testutil::TempDir>();
    // Stopped and removed by the script's watcher if this binary ends
    // without its TearDown (Ctrl-C, a crash).
    setenv("CEPH_CLUSTER_OWNER_PID", std::to_string(getpid()).c_str(), 1);
    auto r = Script("start", {"stagger", "2"});
    if (r.exit_code != 0) {
      Skip("the Ceph cluster did not start", r);
      return;
    }
    r = Script("rgw", {});
    if (r.exit_code != 0) {
      Skip("radosgw did not start", r);
      return;
    }
    std::ifstream env(dir_->path() + "/rgw.env");
    std::string line;
    while (std::getline(env, line)) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos)
        vars_[line.substr(0, eq)] = line.substr(eq + 1);
    }
    // The servers this binary starts take their credentials from here.
    setenv("AWS_ACCESS_KEY_ID", vars_["AWS_ACCESS_KEY_ID"].c_str(), 1);
    setenv("AWS_SECRET_ACCESS_KEY", vars_["AWS_SECRET_ACCESS_KEY"].c_str(), 1);
    const long made = CreateBucket(endpoint(), vars_["AWS_ACCESS_KEY_ID"],
                                   vars_["AWS_SECRET_ACCESS_KEY"]);
    if (made != 200) {
      skip_ = "creating the bucket answered HTTP " + std::to_string(made);
      std::fprintf(stderr, "s3_test: %s\n", skip_.c_str());
    }
  }
  void TearDown() override {
    if (dir_) Script("stop", {});
  }
  const std::string& skip() const { return skip_; }
  std::string endpoint() { return vars_["S3_ENDPOINT"]; }
  // Kills the radosgw (the cluster stays); starts it again on the same
  // port with the same user.
  int StopGateway() { return Script("rgw-stop", {}).exit_code; }
  int StartGateway() { return Script("rgw", {}).exit_code; }
  std::map<std::string, std::string> Credentials() {
    return {{"AWS_ACCESS_KEY_ID", vars_["AWS_ACCESS_KEY_ID"]},
            {"AWS_SECRET_ACCESS_KEY", vars_["AWS_SECRET_ACCESS_KEY"]}};
  }

 private:
  testutil::RunResult Script(const std::string& cmd,
                             std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        std::string(STAGGER_SOURCE_DIR) + "/scripts/ceph-cluster.sh", cmd,
        dir_->path()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return testutil::RunProcess(argv);
  }
  void Skip(const std::string& what, const testutil::RunResult& r) {
    skip_ = what + " (scripts/ceph-cluster.sh exit " +
            std::to_string(r.exit_code) + "): " + r.out;
    std::fprintf(stderr, "s3_test: %s\n", skip_.c_str());
  }
  static Endpoint* instance_;
  std::unique_ptr<testutil::TempDir> dir_;
  std::map<std::string, std::string> vars_;
  std::string skip_;
};
Endpoint* Endpoint::instance_ = nullptr;

// A TCP proxy on 127.0.0.1 to `target` ("http://127.0.0.1:PORT") that
// resets (RST) the first connection on which the client has sent
// `reset_after` bytes; every other byte passes through.
class ResettingProxy {
 public:
  ResettingProxy(const std::string& target, uint64_t reset_after)
      : reset_after_(reset_after) {
    target_port_ =
        static_cast<uint16_t>(std::stoi(target.substr(target.rfind(':') + 1)));
    fd_ = testutil::ListenLoopback(&port_);
    thread_ = std::thread([this] { Accept(); });
  }
  ~ResettingProxy() {
    stop_ = true;
    thread_.join();
    for (std::thread& t : conns_) t.join();
    ::close(fd_);
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }
  int resets() const { return resets_; }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c >= 0) conns_.emplace_back([this, c] { Forward(c); });
    }
  }
  void Forward(int client) {
    const int up = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target_port_);
    uint64_t sent = 0;
    bool open = ::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    std::vector<char> buf(1 << 16);
    while (open && !stop_) {
      pollfd p[2] = {{client, POLLIN, 0}, {up, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if (p[i].revents == 0) continue;
        const int from = i == 0 ? client : up, to = i == 0 ? up : client;
        const ssize_t n = ::read(from, buf.data(), buf.size());
        if (n <= 0) {
          open = false;
          break;
        }
        if (i == 0) sent += n;
        if (i == 0 && sent >= reset_after_ && !reset_done_.exchange(true)) {
          linger l{1, 0};  // close() sends RST, not FIN
          ::setsockopt(client, SOL_SOCKET, SO_LINGER, &l, sizeof l);
          ::setsockopt(up, SOL_SOCKET, SO_LINGER, &l, sizeof l);
          ++resets_;
          open = false;
          break;
        }
        for (ssize_t off = 0; off < n && open;) {
          const ssize_t w = ::write(to, buf.data() + off, n - off);
          if (w <= 0) open = false;
          off += w;
        }
      }
    }
    ::close(up);
    ::close(client);
  }

  const uint64_t reset_after_;
  uint16_t target_port_ = 0;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> reset_done_{false};
  std::atomic<int> resets_{0};
  std::vector<std::thread> conns_;  // touched by the accepting thread only
  std::thread thread_;
};

class S3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Endpoint::Get()->skip().empty()) {
      GTEST_SKIP() << Endpoint::Get()->skip();
    }
  }

  // A store on the bucket under `prefix`, with the run's credentials
  // unless `env` says otherwise.
  std::unique_ptr<S3ObjectStore> Store(
      const std::string& prefix, std::map<std::string, std::string> env = {},
      const std::string& bucket = kBucket, double timeout_s = 30) {
    S3Options o;
    o.endpoint = Endpoint::Get()->endpoint();
    o.bucket = bucket;
    o.prefix = prefix;
    o.timeout_s = timeout_s;
    o.env = env.empty() ? Endpoint::Get()->Credentials() : env;
    auto s = S3ObjectStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  // A server draining to the bucket under `prefix`; its requests give up
  // after 3 s (--s3-timeout-s), so a pass against an endpoint that is down
  // ends soon.
  std::unique_ptr<testutil::ServerProcess> StartServer(
      const std::string& data, const std::string& prefix,
      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "--s3-bucket",      kBucket,
        "--s3-endpoint",    Endpoint::Get()->endpoint(),
        "--s3-prefix",      prefix,
        "--s3-timeout-s",   "3",
        "--metrics-listen", "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto s = testutil::ServerProcess::Start(data, args);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::unique_ptr<Checkpointer> Open(const std::string& servers,
                                     const std::string& job) {
    return testutil::OpenJob(servers, job);
  }

  // As Open, chunks sent raw: no step is stored as deltas of another, so
  // what a deletion frees is known (with deltas, an older step's chunks
  // stay as the bases of a newer one's).
  std::unique_ptr<Checkpointer> OpenRaw(const std::string& servers,
                                        const std::string& job) {
    return testutil::OpenJob(servers, job, CodecChoice::kRaw);
  }

  void WaitDrained(testutil::ServerProcess& s, double steps) {
    testutil::WaitDrained(s, steps);
  }

  testutil::TempDir dir_;
};

// Two steps (the second mostly unchanged: deltas) drained to the bucket,
// the server and its disk gone; a new server on an empty --data lists both
// and loads each bit-exact.
TEST_F(S3Test, DrainedStepsLoadBitExactFromANewServerWithAnEmptyDisk) {
  testutil::RoundTripThroughTheTier(
      [this](const std::string& data) {
        return StartServer(data, "roundtrip");
      },
      dir_.path(), "roundtrip");
}

// A chunk object damaged in the bucket (one payload byte flipped): a load
// through a server without its own copy fails with DATA_LOSS naming it.
TEST_F(S3Test, ADamagedObjectFailsTheLoadNamingIt) {
  auto a = StartServer(dir_.path() + "/a", "damaged");
  ASSERT_NE(a, nullptr);
  std::vector<char> w(2 << 20);
  testutil::FillPattern(w, 3);
  {
    auto ck = Open(a->grpc(), "damaged");
    ASSERT_NE(ck, nullptr);
    ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    auto h = ck->Save(1);
    ASSERT_TRUE(h.ok() && h->Wait().ok());
  }
  WaitDrained(*a, 1);
  a->Stop(SIGTERM);
  auto store = Store("damaged");
  ASSERT_NE(store, nullptr);
  auto chunks = store->List("damaged", "chunk.");
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  ASSERT_FALSE(chunks->empty());
  const ObjectName object{"damaged", chunks->front()};
  auto bytes = store->Get(object);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_GT(bytes->size(), 100u);
  (*bytes)[100] ^= 0x10;
  ASSERT_TRUE(store->Put(object, *bytes).ok());

  auto fresh = StartServer(dir_.path() + "/fresh", "damaged");
  ASSERT_NE(fresh, nullptr);
  testutil::ExpectDataLossNaming(*fresh, "damaged", w.size(), object.name);
}

// `stagger rm` deletes from the bucket too, after the disk: a step named
// goes with the chunks only it used, the other step still loads from a
// new server; `--keep-cold` leaves the bucket alone; `--all` empties the
// job's prefix.
TEST_F(S3Test, RmDeletesFromTheBucketAfterTheDisk) {
  auto a = StartServer(dir_.path() + "/a", "rm");
  ASSERT_NE(a, nullptr);
  std::vector<char> w(2 << 20);
  {
    auto ck = OpenRaw(a->grpc(), "gone");
    ASSERT_NE(ck, nullptr);
    ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    for (int64_t step = 1; step <= 2; ++step) {
      testutil::FillPattern(w, 10 + step);  // nothing shared between steps
      auto h = ck->Save(step);
      ASSERT_TRUE(h.ok() && h->Wait().ok());
    }
  }
  WaitDrained(*a, 2);
  auto store = Store("rm");
  ASSERT_NE(store, nullptr);
  auto before = store->List("gone", "");
  ASSERT_TRUE(before.ok()) << before.status();
  auto rm = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {testutil::BinDir() + "/stagger",
                                     "--server",
                                     a->grpc(),
                                     "rm",
                                     "--job",
                                     "gone",
                                     "--grace-s",
                                     "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testutil::RunProcess(argv);
  };
  auto out = rm({"--step", "1"});
  ASSERT_EQ(out.exit_code, 0) << out.out;
  EXPECT_NE(out.out.find("cold: deleted 1 step [1] and 2 chunks"),
            std::string::npos)
      << out.out;
  auto after = store->List("gone", "");
  ASSERT_TRUE(after.ok()) << after.status();
  for (const std::string& name : *after) {
    EXPECT_EQ(name.find(".00000000000000000001"), std::string::npos) << name;
  }
  EXPECT_EQ(after->size() + 4, before->size());  // step, manifest, 2 chunks
  a->Stop(SIGTERM);
  {
    auto fresh = StartServer(dir_.path() + "/fresh", "rm");
    ASSERT_NE(fresh, nullptr);
    auto ck = Open(fresh->grpc(), "gone");
    ASSERT_NE(ck, nullptr);
    auto steps = ck->Steps(false);
    ASSERT_TRUE(steps.ok()) << steps.status();
    ASSERT_EQ(steps->size(), 1u);
    EXPECT_EQ((*steps)[0].step, 2);
    testutil::ExpectLoads(*fresh, "gone", 2, w);
  }
  a = StartServer(dir_.path() + "/a", "rm");
  ASSERT_NE(a, nullptr);
  out = rm({"--all", "--keep-cold"});
  ASSERT_EQ(out.exit_code, 0) << out.out;
  EXPECT_EQ(out.out.find("cold:"), std::string::npos) << out.out;
  auto kept = store->List("gone", "");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->size(), after->size());
  a->Stop(SIGTERM);
  std::filesystem::remove_all(dir_.path() + "/a");
  a = StartServer(dir_.path() + "/a", "rm");  // imports step 2 again
  ASSERT_NE(a, nullptr);
  out = rm({"--all"});
  ASSERT_EQ(out.exit_code, 0) << out.out;
  auto none = store->List("gone", "");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << none->front();
}

// `stagger gc --keep 1` keeps the newest step in the bucket too (after
// the disk); `--keep-cold` leaves the bucket alone.
TEST_F(S3Test, GcKeepsTheNewestStepsInTheBucketToo) {
  auto a = StartServer(dir_.path() + "/a", "gc");
  ASSERT_NE(a, nullptr);
  std::vector<char> w(2 << 20);
  {
    auto ck = OpenRaw(a->grpc(), "old");
    ASSERT_NE(ck, nullptr);
    ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    for (int64_t step = 1; step <= 3; ++step) {
      testutil::FillPattern(w, 30 + step);
      auto h = ck->Save(step);
      ASSERT_TRUE(h.ok() && h->Wait().ok());
    }
  }
  WaitDrained(*a, 3);
  auto store = Store("gc");
  ASSERT_NE(store, nullptr);
  auto steps_in_bucket = [&] {
    int n = 0;
    auto names = store->List("old", "step.");
    EXPECT_TRUE(names.ok()) << names.status();
    if (names.ok()) n = static_cast<int>(names->size());
    return n;
  };
  ASSERT_EQ(steps_in_bucket(), 3);
  auto gc = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {testutil::BinDir() + "/stagger",
                                     "--server",
                                     a->grpc(),
                                     "gc",
                                     "--job",
                                     "old",
                                     "--grace-s",
                                     "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testutil::RunProcess(argv);
  };
  auto out = gc({"--keep", "2", "--keep-cold"});
  ASSERT_EQ(out.exit_code, 0) << out.out;
  EXPECT_EQ(out.out.find("cold:"), std::string::npos) << out.out;
  EXPECT_EQ(steps_in_bucket(), 3);
  out = gc({"--keep", "1"});
  ASSERT_EQ(out.exit_code, 0) << out.out;
  EXPECT_NE(out.out.find("cold: deleted 2 steps [1,2] and 4 chunks"),
            std::string::npos)
      << out.out;
  EXPECT_EQ(steps_in_bucket(), 1);
  a->Stop(SIGTERM);
  std::filesystem::remove_all(dir_.path() + "/a");
  auto fresh = StartServer(dir_.path() + "/fresh", "gc");
  ASSERT_NE(fresh, nullptr);
  testutil::ExpectLoads(*fresh, "old", 3, w);
}

// Objects above the part size go as multipart uploads and come back
// whole; a conditional create of an existing one writes nothing.
TEST_F(S3Test, LargeObjectsInPartsRoundTrip) {
  S3Options o;
  o.endpoint = Endpoint::Get()->endpoint();
  o.bucket = kBucket;
  o.prefix = "parts";
  o.part_bytes = 5 << 20;
  o.env = Endpoint::Get()->Credentials();
  auto store = S3ObjectStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<char> pattern(12 << 20 | 777);
  testutil::FillPattern(pattern, 9);
  const std::string big(pattern.begin(), pattern.end());
  const ObjectName a{"job", "big"}, b{"job", "bigger"};
  ASSERT_TRUE((*store)->Put(a, big).ok());
  auto got = (*store)->Get(a);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == big);
  auto again = (*store)->PutNew(a, std::string(11 << 20, 'z'));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  EXPECT_TRUE(*(*store)->Get(a) == big);
  auto created = (*store)->PutNew(b, big + "tail");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*created);
  auto info = (*store)->Stat(b);
  ASSERT_TRUE(info.ok() && info->has_value()) << info.status();
  EXPECT_EQ((*info)->size, big.size() + 4);
}

// The endpoint gone while a job saves: the save completes on the disk,
// the drain says it is behind, and catches up once the endpoint is back;
// a new server then serves both steps from the bucket.
TEST_F(S3Test, TheEndpointDownMidRunIsCaughtUpWithWhenBack) {
  auto a = StartServer(dir_.path() + "/a", "outage");
  ASSERT_NE(a, nullptr);
  std::vector<char> w(2 << 20);
  auto ck = Open(a->grpc(), "outage");
  ASSERT_NE(ck, nullptr);
  ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
  testutil::FillPattern(w, 21);
  auto h = ck->Save(1);
  ASSERT_TRUE(h.ok() && h->Wait().ok());
  WaitDrained(*a, 1);
  ASSERT_EQ(Endpoint::Get()->StopGateway(), 0);
  testutil::FillPattern(w, 22);
  const auto t0 = std::chrono::steady_clock::now();
  h = ck->Save(2);
  ASSERT_TRUE(h.ok() && h->Wait().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  std::string page;
  for (int i = 0; i < 300; ++i) {  // a pass fails after 3 s
    auto got = metrics::HttpGet(a->metrics(), "/metrics");
    if (got.ok()) page = *got;
    if (testutil::Sample(page, "stagger_server_drain_steps_behind") == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(testutil::Sample(page, "stagger_server_drain_steps_behind"), 1)
      << page;
  // An rm meanwhile: done on the disk, the bucket's part reported failed
  // (exit 1, naming it), the call not failed as a whole.
  auto rm = testutil::RunProcess({testutil::BinDir() + "/stagger", "--server",
                                  a->grpc(), "rm", "--job", "outage", "--step",
                                  "1", "--grace-s", "0"});
  EXPECT_EQ(rm.exit_code, 1) << rm.out;
  EXPECT_NE(rm.out.find("the durable tier S3 bucket 'ckpt'"), std::string::npos)
      << rm.out;
  EXPECT_NE(rm.out.find("deleted 1 step [1]"), std::string::npos) << rm.out;
  auto left = ck->Steps(false);
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].step, 2);
  ASSERT_EQ(Endpoint::Get()->StartGateway(), 0);
  WaitDrained(*a, 2);
  ck.reset();
  a->Stop(SIGTERM);
  std::filesystem::remove_all(dir_.path() + "/a");
  auto fresh = StartServer(dir_.path() + "/fresh", "outage");
  ASSERT_NE(fresh, nullptr);
  testutil::ExpectLoads(*fresh, "outage", 2, w);
}

// Two servers on one bucket and prefix: the steps one drains are listed
// (cold) and served bit-exact by the other within its --cold-import-s,
// without a restart; deleted from the bucket (rm on the first), they are
// no longer listed by the second.
TEST_F(S3Test, StepsAnotherServerDrainedAreServedWithoutARestart) {
  auto a = StartServer(dir_.path() + "/a", "shared");
  ASSERT_NE(a, nullptr);
  auto b = StartServer(dir_.path() + "/b", "shared", {"--cold-import-s", "1"});
  ASSERT_NE(b, nullptr);
  std::vector<char> w(2 << 20);
  {
    auto ck = OpenRaw(a->grpc(), "seen");
    ASSERT_NE(ck, nullptr);
    ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    for (int64_t step = 1; step <= 2; ++step) {
      testutil::FillPattern(w, 40 + step);
      auto h = ck->Save(step);
      ASSERT_TRUE(h.ok() && h->Wait().ok());
    }
  }
  WaitDrained(*a, 2);
  auto listed = [&](testutil::ServerProcess& s) {
    auto ck = Open(s.grpc(), "seen");
    std::vector<int64_t> out;
    if (ck == nullptr) return out;
    auto steps = ck->Steps(false);
    EXPECT_TRUE(steps.ok()) << steps.status();
    if (steps.ok())
      for (const auto& st : *steps) out.push_back(st.step);
    return out;
  };
  std::vector<int64_t> on_b;
  for (int i = 0; i < 150 && on_b.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    on_b = listed(*b);
  }
  EXPECT_EQ(on_b, (std::vector<int64_t>{1, 2}));
  auto ls = testutil::RunProcess({testutil::BinDir() + "/stagger", "--server",
                                  b->grpc(), "ls", "--job", "seen", "--json"});
  EXPECT_NE(ls.out.find("\"tiers\":[\"cold\"]"), std::string::npos) << ls.out;
  testutil::ExpectLoads(*b, "seen", 2, w);
  auto page = metrics::HttpGet(b->metrics(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(testutil::Sample(*page, "stagger_server_cold_steps_imported_total"),
            2)
      << *page;

  auto rm = testutil::RunProcess({testutil::BinDir() + "/stagger", "--server",
                                  a->grpc(), "rm", "--job", "seen", "--step",
                                  "1", "--grace-s", "0"});
  ASSERT_EQ(rm.exit_code, 0) << rm.out;
  for (int i = 0; i < 150 && on_b.size() != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    on_b = listed(*b);
  }
  EXPECT_EQ(on_b, std::vector<int64_t>{2});
}

// --rados-keep is the durable tier's retention on S3 too: after each pass
// that drained a step of a job, the newest N stay in the bucket, and a new
// server loads the newest.
TEST_F(S3Test, RetentionKeepsTheNewestStepsInTheBucket) {
  auto a = StartServer(dir_.path() + "/a", "keep",
                       {"--rados-keep", "1", "--gc-grace-s", "0"});
  ASSERT_NE(a, nullptr);
  std::vector<char> w(2 << 20);
  auto ck = OpenRaw(a->grpc(), "kept");
  ASSERT_NE(ck, nullptr);
  ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
  for (int64_t step = 1; step <= 3; ++step) {
    testutil::FillPattern(w, 50 + step);
    auto h = ck->Save(step);
    ASSERT_TRUE(h.ok() && h->Wait().ok());
    WaitDrained(*a, step);
  }
  ck.reset();
  auto store = Store("keep");
  ASSERT_NE(store, nullptr);
  std::vector<std::string> steps, chunks;
  for (int i = 0; i < 100; ++i) {
    auto s = store->List("kept", "step.");
    auto c = store->List("kept", "chunk.");
    ASSERT_TRUE(s.ok() && c.ok()) << s.status() << c.status();
    steps = *s;
    chunks = *c;
    if (steps.size() == 1 && chunks.size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_NE(steps[0].find("0000000003"), std::string::npos) << steps[0];
  EXPECT_EQ(chunks.size(), 2u);  // step 3's two chunks, nothing older
  a->Stop(SIGTERM);
  std::filesystem::remove_all(dir_.path() + "/a");
  auto fresh = StartServer(dir_.path() + "/fresh", "keep");
  ASSERT_NE(fresh, nullptr);
  testutil::ExpectLoads(*fresh, "kept", 3, w);
}

// A connection reset in the middle of a multipart upload (the second part
// cut off mid-body): the part is sent again on a new connection and the
// object is whole.
TEST_F(S3Test, AConnectionResetMidUploadIsRetried) {
  ResettingProxy proxy(Endpoint::Get()->endpoint(), 7 << 20);
  S3Options o;
  o.endpoint = proxy.url();
  o.bucket = kBucket;
  o.prefix = "reset";
  o.part_bytes = 5 << 20;
  o.env = Endpoint::Get()->Credentials();
  auto store = S3ObjectStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<char> pattern(12 << 20);
  testutil::FillPattern(pattern, 61);
  const std::string big(pattern.begin(), pattern.end());
  ASSERT_TRUE((*store)->Put({"job", "cut"}, big).ok());
  EXPECT_EQ(proxy.resets(), 1);
  auto got = Store("reset")->Get({"job", "cut"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == big);
}

// Refused credentials in a credentials file are read again on the next
// refusal: once the file holds working keys, the same store (a server
// that keeps running) gets through.
TEST_F(S3Test, ACredentialsFileFixedWhileRunningIsReadAgain) {
  const std::string file = dir_.path() + "/credentials";
  auto write = [&](const std::string& secret) {
    std::ofstream f(file);
    f << "[default]\naws_access_key_id = "
      << Endpoint::Get()->Credentials()["AWS_ACCESS_KEY_ID"]
      << "\naws_secret_access_key = " << secret << "\n";
  };
  write("wrong");
  auto store = Store("rotate", {{"AWS_SHARED_CREDENTIALS_FILE", file}});
  ASSERT_NE(store, nullptr);
  Status s = store->Put({"job", "x"}, "y");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find(file), std::string::npos) << s;
  write(Endpoint::Get()->Credentials()["AWS_SECRET_ACCESS_KEY"]);
  s = store->Put({"job", "x"}, "y");
  EXPECT_TRUE(s.ok()) << s;
  auto got = store->Get({"job", "x"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "y");
}

// The store's calls against the endpoint, and its errors.
TEST_F(S3Test, StoreCallsAndTheirErrors) {
  auto store = Store("calls");
  ASSERT_NE(store, nullptr);
  const ObjectName a{"job-a", "step.1"}, b{"job-b", "x/y z"};
  ASSERT_TRUE(store->Put(a, "first").ok());
  auto got = store->Get(a);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "first");
  auto created = store->PutNew(a, "second");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE(*created);  // exists: nothing written
  EXPECT_EQ(*store->Get(a), "first");
  created = store->PutNew(b, std::string(1 << 20, 'b'));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*created);
  auto info = store->Stat(b);
  ASSERT_TRUE(info.ok() && info->has_value()) << info.status();
  EXPECT_EQ((*info)->size, 1u << 20);
  EXPECT_GT((*info)->written_unix_s, 1700000000);
  auto head = store->Read(
      b, transport::Buffer(16));  // a prefix only (a record's header)
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->view(), std::string(16, 'b'));
  auto whole = store->Read(b, transport::Buffer((*info)->size));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->view(), std::string(1 << 20, 'b'));
  auto listed = store->List("job-b", "");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, std::vector<std::string>{"x/y z"});
  auto ns = store->Namespaces();
  ASSERT_TRUE(ns.ok()) << ns.status();
  std::sort(ns->begin(), ns->end());
  EXPECT_EQ(*ns, (std::vector<std::string>{"job-a", "job-b"}));
  ASSERT_TRUE(store->Remove(b).ok());
  ASSERT_TRUE(store->Remove(b).ok());  // absent: OK
  info = store->Stat(b);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->has_value());
  EXPECT_EQ(store->Get(b).status().code(), absl::StatusCode::kNotFound);

  // Refused credentials: at once, no retries, naming the bucket.
  auto env = Endpoint::Get()->Credentials();
  env["AWS_SECRET_ACCESS_KEY"] = "wrong";
  auto wrong = Store("calls", env);
  ASSERT_NE(wrong, nullptr);
  auto t0 = std::chrono::steady_clock::now();
  Status s = wrong->Put(a, "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("'ckpt'"), std::string::npos) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));

  auto missing = Store("", {}, "no-such-bucket");
  ASSERT_NE(missing, nullptr);
  s = missing->Put(a, "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("no-such-bucket"), std::string::npos) << s;

  // An endpoint nobody listens on: retried until the budget, UNAVAILABLE.
  S3Options o;
  o.endpoint = "http://127.0.0.1:1";
  o.bucket = kBucket;
  o.timeout_s = 1;
  o.env = Endpoint::Get()->Credentials();
  auto down = S3ObjectStore::Open(o);
  ASSERT_TRUE(down.ok()) << down.status();
  t0 = std::chrono::steady_clock::now();
  s = (*down)->Put(a, "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace stagger

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new stagger::Endpoint);
  return RUN_ALL_TESTS();
}
