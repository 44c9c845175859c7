#include "client/sender.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace stagger::client {
namespace {

// A data connection that holds every call until the test lets its payload
// leave (the sent callback) and answers it.
class HeldConnection : public transport::Connection {
 public:
  void Call(uint16_t, std::string_view, std::string_view,
            transport::ReplyCallback done,
            transport::SentCallback sent) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back({std::move(done), std::move(sent)});
  }
  std::string peer() const override { return "held"; }

  size_t calls() {
    absl::MutexLock lock(&mu_);
    return calls_.size();
  }
  // Waits until `n` calls arrived; false after `timeout`.
  bool AwaitCalls(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return calls_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  // Call `i`'s payload leaves, then it is answered (with an error: the
  // sender only counts it done).
  void LeaveAndAnswer(size_t i) {
    Held h;
    {
      absl::MutexLock lock(&mu_);
      h = std::move(calls_[i]);
    }
    if (h.sent) h.sent();
    h.done(absl::UnavailableError("held connection"));
  }

 private:
  struct Held {
    transport::ReplyCallback done;
    transport::SentCallback sent;
  };
  absl::Mutex mu_;
  std::vector<Held> calls_ ABSL_GUARDED_BY(mu_);
};

TEST(SenderTest, UntilTheLinkRateIsKnownOneChunkIsOnTheWire) {
  CheckpointerOptions o;
  o.qos_floor_Bps = 0;
  auto shaping = Shaping::Make(o);
  ASSERT_TRUE(shaping.ok()) << shaping.status();
  ServerConn server;
  server.address = "held";
  auto held = std::make_unique<HeldConnection>();
  HeldConnection* conn = held.get();
  server.SetData(std::move(held));
  const std::string payload(64 << 10, 'x');
  absl::Mutex mu;
  int done = 0;
  {
    Sender sender(/*max_inflight=*/8, /*policy=*/nullptr, shaping->get());
    for (int i = 0; i < 3; ++i) {
      SendItem item;
      item.server = &server;
      item.header = "h";
      item.payload = payload;
      item.raw_bytes = payload.size();
      item.what = "chunk " + std::to_string(i);
      item.done = [&mu, &done](const Status&) {
        absl::MutexLock lock(&mu);
        ++done;
      };
      sender.Enqueue(std::move(item));
    }
    ASSERT_TRUE(conn->AwaitCalls(1, absl::Seconds(10)));
    // Nothing has left yet: the second chunk is held back (8 may be in
    // flight), and stays held until the first payload leaves.
    const auto give_up = absl::Now() + absl::Seconds(10);
    while (sender.probe_waits() == 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_GT(sender.probe_waits(), 0u);
    EXPECT_EQ(conn->calls(), 1u);
    // Once the first payload has left the rate is known, and the rest go.
    conn->LeaveAndAnswer(0);
    ASSERT_TRUE(conn->AwaitCalls(3, absl::Seconds(10)));
    conn->LeaveAndAnswer(1);
    conn->LeaveAndAnswer(2);
  }
  absl::MutexLock lock(&mu);
  EXPECT_EQ(done, 3);
}

}  // namespace
}  // namespace stagger::client
