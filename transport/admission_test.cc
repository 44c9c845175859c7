// Pull admission (transport.h, PullAdmission), run over UCX and the
// in-process transport: payloads wait for their grant, stay charged until
// the handler's Buffer is destroyed, and every grant is released exactly
// once whatever happens to the request.
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "transport/inproc_transport.h"
#include "transport/testing/handlers.h"
#include "transport/transport.h"
#include "transport/ucx_transport.h"

namespace stagger::transport {
namespace {

using Kind = testutil::TransportKind;
using testutil::EchoHandler;
using testutil::ParkingHandler;
using testutil::Pattern;

constexpr absl::Duration kWait = absl::Seconds(20);

// Grants by hand (or at once with auto_grant) and keeps the books: bytes
// charged per peer, peers reported gone.
class FakeAdmission : public PullAdmission {
 public:
  struct Asked {
    uint64_t peer;
    size_t bytes;
    std::function<void()> grant;
  };

  void set_auto_grant(bool on) {
    absl::MutexLock l(&mu_);
    auto_grant_ = on;
  }

  void Request(uint64_t peer, size_t bytes,
               std::function<void()> grant) override {
    {
      absl::MutexLock l(&mu_);
      ++asked_;
      last_peer_ = peer;
      if (!auto_grant_) {
        queued_.push_back({peer, bytes, std::move(grant)});
        return;
      }
      charged_ += bytes;
    }
    grant();
  }

  void Release(uint64_t peer, size_t bytes) override {
    absl::MutexLock l(&mu_);
    charged_ -= bytes;
    released_ += bytes;
    ++releases_;
  }

  void PeerGone(uint64_t peer) override {
    absl::MutexLock l(&mu_);
    gone_.push_back(peer);
  }

  // Grants every queued request (also those of gone peers: a grant racing
  // with the disconnect), on the calling thread.
  void GrantAll() {
    std::deque<Asked> now;
    {
      absl::MutexLock l(&mu_);
      now.swap(queued_);
      for (const Asked& a : now) charged_ += a.bytes;
    }
    for (Asked& a : now) a.grant();
  }

  bool AwaitQueued(size_t n) {
    absl::MutexLock l(&mu_);
    auto ready = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queued_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), kWait);
  }
  bool AwaitCharged(int64_t bytes) {
    absl::MutexLock l(&mu_);
    auto ready = [this, bytes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return charged_ == bytes;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), kWait);
  }
  bool AwaitGone(uint64_t peer) {
    absl::MutexLock l(&mu_);
    auto ready = [this, peer]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (uint64_t p : gone_) {
        if (p == peer) return true;
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), kWait);
  }

  int64_t charged() {
    absl::MutexLock l(&mu_);
    return charged_;
  }
  int asked() {
    absl::MutexLock l(&mu_);
    return asked_;
  }
  int releases() {
    absl::MutexLock l(&mu_);
    return releases_;
  }
  uint64_t last_peer() {
    absl::MutexLock l(&mu_);
    return last_peer_;
  }
  std::vector<uint64_t> gone() {
    absl::MutexLock l(&mu_);
    return gone_;
  }

 private:
  absl::Mutex mu_;
  bool auto_grant_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Asked> queued_ ABSL_GUARDED_BY(mu_);
  int64_t charged_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t released_ ABSL_GUARDED_BY(mu_) = 0;
  int asked_ ABSL_GUARDED_BY(mu_) = 0;
  int releases_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_peer_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> gone_ ABSL_GUARDED_BY(mu_);
};

// Grants in FIFO order while the bytes fit a budget (one oversized request
// when nothing is charged); Release grants the next ones on its own thread.
class BudgetAdmission : public PullAdmission {
 public:
  explicit BudgetAdmission(int64_t budget) : budget_(budget) {}

  void Request(uint64_t peer, size_t bytes,
               std::function<void()> grant) override {
    std::vector<std::function<void()>> run;
    {
      absl::MutexLock l(&mu_);
      queue_.push_back({bytes, std::move(grant)});
      Pick(&run);
    }
    for (auto& g : run) g();
  }
  void Release(uint64_t peer, size_t bytes) override {
    std::vector<std::function<void()>> run;
    {
      absl::MutexLock l(&mu_);
      charged_ -= bytes;
      Pick(&run);
    }
    for (auto& g : run) g();
  }
  void PeerGone(uint64_t peer) override {}

  int64_t max_charged() {
    absl::MutexLock l(&mu_);
    return max_charged_;
  }
  bool AwaitCharged(int64_t bytes) {
    absl::MutexLock l(&mu_);
    auto ready = [this, bytes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return charged_ == bytes;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), kWait);
  }

 private:
  void Pick(std::vector<std::function<void()>>* run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!queue_.empty()) {
      const int64_t bytes = static_cast<int64_t>(queue_.front().first);
      if (charged_ != 0 && charged_ + bytes > budget_) return;
      charged_ += bytes;
      max_charged_ = std::max(max_charged_, charged_);
      run->push_back(std::move(queue_.front().second));
      queue_.pop_front();
    }
  }

  const int64_t budget_;
  absl::Mutex mu_;
  std::deque<std::pair<size_t, std::function<void()>>> queue_
      ABSL_GUARDED_BY(mu_);
  int64_t charged_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_charged_ ABSL_GUARDED_BY(mu_) = 0;
};

// The outcome of one asynchronous Call.
struct Pending {
  absl::Notification done;
  std::optional<Result<Message>> result;
  ReplyCallback Callback() {
    return [this](Result<Message> r) {
      result.emplace(std::move(r));
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(kWait); }
};

class AdmissionTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kUcx) {
      auto t = NewUcxTransport();
      ASSERT_TRUE(t.ok()) << t.status();
      transport_ = std::move(*t);
    } else {
      transport_ = NewInProcTransport();
    }
  }

  std::unique_ptr<Listener> MustListen(RequestHandler* handler,
                                       PullAdmission* admission) {
    ListenOptions options;
    options.admission = admission;
    auto l = transport_->Listen(
        GetParam() == Kind::kUcx ? "ucx:" : "inproc:", handler, options);
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? std::move(*l) : nullptr;
  }

  std::unique_ptr<Connection> MustConnect(const Listener& listener) {
    auto c = transport_->Connect(listener.address());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::unique_ptr<Transport> transport_;
};

INSTANTIATE_TEST_SUITE_P(BothTransports, AdmissionTest,
                         ::testing::Values(Kind::kUcx, Kind::kInProc),
                         [](const auto& info) {
                           return info.param == Kind::kUcx ? "Ucx" : "InProc";
                         });

TEST_P(AdmissionTest, PayloadWaitsForItsGrantThenArrivesIntact) {
  FakeAdmission admission;
  EchoHandler handler;
  auto listener = MustListen(&handler, &admission);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);

  const std::string big = Pattern(3 << 20, 1);
  Pending pending;
  conn->Call(1, "big", big, pending.Callback());
  ASSERT_TRUE(admission.AwaitQueued(1));
  // The connection stays live: a request without a payload overtakes the
  // one whose payload waits, and the handler has seen only that one.
  Result<Message> small = conn->CallSync(3, "small", "");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->op, 4);
  EXPECT_EQ(handler.headers(), std::vector<std::string>{"small"});
  EXPECT_FALSE(pending.done.HasBeenNotified());

  admission.GrantAll();
  ASSERT_TRUE(pending.Wait());
  ASSERT_TRUE(pending.result->ok()) << pending.result->status();
  EXPECT_EQ((*pending.result)->op, 2);
  EXPECT_TRUE((*pending.result)->payload.view() == big) << "payload differs";
  EXPECT_EQ(handler.headers(), (std::vector<std::string>{"small", "big"}));
  EXPECT_EQ(admission.asked(), 1);
  // The handler saw the peer id the admission was asked for.
  EXPECT_EQ(handler.peers().back(), admission.last_peer());
  EXPECT_NE(admission.last_peer(), 0u);
  pending.result.reset();  // in-process, the reply holds the same Buffer
  EXPECT_TRUE(admission.AwaitCharged(0));
  EXPECT_EQ(admission.releases(), 1);
}

TEST_P(AdmissionTest, ChargeLastsUntilTheHandlersBufferIsDestroyed) {
  FakeAdmission admission;
  admission.set_auto_grant(true);
  ParkingHandler handler;
  auto listener = MustListen(&handler, &admission);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);

  const std::string payload = Pattern(1 << 20, 2);
  Pending pending;
  conn->Call(1, "h", payload, pending.Callback());
  std::deque<ParkingHandler::Parked> parked = handler.Take(1);
  ASSERT_EQ(parked.size(), 1u);
  EXPECT_EQ(admission.charged(), static_cast<int64_t>(payload.size()));
  EXPECT_EQ(parked[0].request.peer, admission.last_peer());
  // Moving the buffer moves the charge with it.
  Buffer moved = std::move(parked[0].request.payload);
  EXPECT_TRUE(moved.view() == payload);
  EXPECT_EQ(admission.charged(), static_cast<int64_t>(payload.size()));
  moved = Buffer();
  EXPECT_EQ(admission.charged(), 0);
  EXPECT_EQ(admission.releases(), 1);
  parked[0].reply->Send(2, "done", Buffer());
  ASSERT_TRUE(pending.Wait());
  EXPECT_TRUE(pending.result->ok()) << pending.result->status();

  // UCX admits only rendezvous payloads; in-process, every payload.
  std::thread answer([&] {
    auto p = handler.Take(1);
    if (!p.empty()) p[0].reply->Send(2, "", Buffer());
  });
  Result<Message> small = conn->CallSync(1, "", "tiny");
  answer.join();
  EXPECT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(admission.asked(), GetParam() == Kind::kUcx ? 1 : 2);
  EXPECT_TRUE(admission.AwaitCharged(0));
}

TEST_P(AdmissionTest, DisconnectDropsWaitingPayloadsAndLateGrantsAreReleased) {
  FakeAdmission admission;
  EchoHandler handler;
  auto listener = MustListen(&handler, &admission);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);

  const std::string big = Pattern(2 << 20, 3);
  Pending first, second;
  conn->Call(1, "a", big, first.Callback());
  conn->Call(1, "b", big, second.Callback());
  ASSERT_TRUE(admission.AwaitQueued(2));
  const uint64_t peer = admission.last_peer();
  conn.reset();
  ASSERT_TRUE(first.Wait());
  ASSERT_TRUE(second.Wait());
  EXPECT_EQ(first.result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.result->status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(admission.AwaitGone(peer));
  EXPECT_EQ(admission.gone(), std::vector<uint64_t>{peer});

  // Grants that race with the disconnect come back at once.
  admission.GrantAll();
  EXPECT_TRUE(admission.AwaitCharged(0));
  EXPECT_EQ(admission.releases(), 2);
  EXPECT_TRUE(handler.headers().empty());

  // The listener still serves others.
  admission.set_auto_grant(true);
  auto other = MustConnect(*listener);
  ASSERT_NE(other, nullptr);
  Result<Message> r = other->CallSync(1, "c", big);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->payload.view() == big);
}

TEST_P(AdmissionTest, ListenerShutdownWithWaitingPayloadsReleasesEverything) {
  FakeAdmission admission;
  EchoHandler handler;
  auto listener = MustListen(&handler, &admission);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);

  const std::string big = Pattern(1 << 20, 4);
  Pending first, second;
  conn->Call(1, "a", big, first.Callback());
  conn->Call(1, "b", big, second.Callback());
  ASSERT_TRUE(admission.AwaitQueued(2));
  const uint64_t peer = admission.last_peer();
  listener.reset();
  ASSERT_TRUE(first.Wait());
  ASSERT_TRUE(second.Wait());
  EXPECT_EQ(first.result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(admission.gone(), std::vector<uint64_t>{peer});
  admission.GrantAll();  // after the listener is gone
  EXPECT_EQ(admission.charged(), 0);
  EXPECT_EQ(admission.releases(), 2);
  EXPECT_TRUE(handler.headers().empty());
}

TEST_P(AdmissionTest, BudgetBoundsChargedBytesAcrossConnections) {
  constexpr size_t kPayload = 512 << 10;
  constexpr int kCallsPerConn = 8;
  BudgetAdmission admission(2 * kPayload);
  EchoHandler handler;
  auto listener = MustListen(&handler, &admission);
  ASSERT_NE(listener, nullptr);
  auto a = MustConnect(*listener);
  auto b = MustConnect(*listener);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);

  std::vector<std::string> payloads;
  for (int i = 0; i < 2 * kCallsPerConn; ++i) {
    payloads.push_back(Pattern(kPayload, 100 + i));
  }
  absl::BlockingCounter done(2 * kCallsPerConn);
  absl::Mutex mu;
  int intact = 0;
  for (int i = 0; i < 2 * kCallsPerConn; ++i) {
    Connection* conn = (i % 2 == 0 ? a : b).get();
    conn->Call(1, std::to_string(i), payloads[i], [&, i](Result<Message> r) {
      {
        absl::MutexLock l(&mu);
        if (r.ok() && r->header == std::to_string(i) &&
            r->payload.view() == payloads[i]) {
          ++intact;
        }
      }
      done.DecrementCount();
    });
  }
  done.Wait();
  EXPECT_EQ(intact, 2 * kCallsPerConn);
  EXPECT_LE(admission.max_charged(), static_cast<int64_t>(2 * kPayload));
  EXPECT_TRUE(admission.AwaitCharged(0));
}

TEST_P(AdmissionTest, OversizedHeaderWithAdmittedPayloadArrivesIntact) {
  // On UCX a header too large for the AM header travels in the data, and
  // the payload is copied out of the pulled buffer: the charge follows it.
  FakeAdmission admission;
  admission.set_auto_grant(true);
  ParkingHandler handler;
  auto listener = MustListen(&handler, &admission);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  const std::string header = Pattern(kMaxHeaderBytes, 5);
  const std::string payload = Pattern(300 << 10, 6);
  Pending pending;
  conn->Call(1, header, payload, pending.Callback());
  std::deque<ParkingHandler::Parked> parked = handler.Take(1);
  ASSERT_EQ(parked.size(), 1u);
  EXPECT_EQ(parked[0].request.header, header);
  EXPECT_TRUE(parked[0].request.payload.view() == payload);
  EXPECT_GT(admission.charged(), 0);
  parked[0].request.payload = Buffer();
  EXPECT_EQ(admission.charged(), 0);
  parked[0].reply->Send(2, "", Buffer());
  ASSERT_TRUE(pending.Wait());
  EXPECT_TRUE(pending.result->ok()) << pending.result->status();
}

}  // namespace
}  // namespace stagger::transport
