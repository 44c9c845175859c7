// A control plane whose threads are all busy: gRPC's own refusal (a server
// with a thread quota, as stagger-server --control-threads sets) is seen
// as busy and the call is repeated until it runs; other errors are not.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/server_set.h"

namespace stagger::client {
namespace {

// Hello takes 30 ms; answers `fail` when it is set.
class SlowHello final : public pb::Stagger::Service {
 public:
  grpc::Status Hello(grpc::ServerContext*, const pb::HelloRequest*,
                     pb::HelloReply* reply) override {
    ran.fetch_add(1);
    absl::SleepFor(absl::Milliseconds(30));
    if (fail)
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "disk full");
    reply->set_domain("d");
    return grpc::Status::OK;
  }
  std::atomic<int> ran{0};
  std::atomic<bool> fail{false};
};

class BusyRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    grpc::ResourceQuota quota("busy-test");
    quota.SetMaxThreads(2);  // one call at a time, one poller
    builder.SetResourceQuota(quota);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    conn_.address = "127.0.0.1:" + std::to_string(port);
    conn_.stub = pb::Stagger::NewStub(
        grpc::CreateChannel(conn_.address, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  // `n` threads each make one Hello at once; returns their outcomes.
  std::vector<grpc::Status> Burst(int n, bool retry, double timeout_s) {
    std::vector<grpc::Status> out(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        auto once = [&](grpc::ClientContext* ctx) {
          pb::HelloRequest req;
          pb::HelloReply reply;
          return conn_.stub->Hello(ctx, req, &reply);
        };
        if (retry) {
          out[i] = CallUnlessBusy(conn_, timeout_s, once);
        } else {
          grpc::ClientContext ctx;
          PrepareCall(conn_, &ctx, timeout_s);
          out[i] = once(&ctx);
        }
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  SlowHello service_;
  std::unique_ptr<grpc::Server> server_;
  ServerConn conn_;
};

TEST_F(BusyRetryTest, GrpcsRefusalIsBusyAndNothingRan) {
  int busy = 0, ok = 0;
  for (const grpc::Status& s : Burst(16, /*retry=*/false, 10)) {
    if (IsServerBusy(s)) {
      ++busy;
    } else {
      EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
      ++ok;
    }
  }
  EXPECT_GT(busy, 0) << "16 calls at once against a quota of 2 threads";
  EXPECT_EQ(ok + busy, 16);
  EXPECT_EQ(service_.ran.load(), ok);  // a refused call never ran
}

TEST_F(BusyRetryTest, RepeatedUntilEveryCallRan) {
  const uint64_t before = BusyRetries();
  for (const grpc::Status& s : Burst(16, /*retry=*/true, 30)) {
    EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  }
  EXPECT_EQ(service_.ran.load(), 16);
  EXPECT_GT(BusyRetries(), before);
}

TEST_F(BusyRetryTest, OtherErrorsAndTimeAreNotRepeated) {
  service_.fail = true;
  std::vector<grpc::Status> one = Burst(1, /*retry=*/true, 10);
  EXPECT_EQ(one[0].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(one[0].error_message(), "disk full");
  EXPECT_FALSE(IsServerBusy(one[0]));
  EXPECT_EQ(service_.ran.load(), 1);
  // With 0.1 s in all, calls still refused then give up busy.
  service_.fail = false;
  const absl::Time start = absl::Now();
  int busy = 0;
  for (const grpc::Status& s : Burst(16, /*retry=*/true, 0.1)) {
    busy += IsServerBusy(s);
  }
  EXPECT_GT(busy, 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace stagger::client
