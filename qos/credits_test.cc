#include "qos/credits.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"

namespace stagger::qos {
namespace {

// Records the order of grants ("name") and cancellations ("name!").
// Tests declare it before the ledger, whose destructor answers the requests
// still queued.
class Recorder {
 public:
  CreditLedger::GrantCallback Cb(std::string name) {
    return [this, name](Status s) {
      log_.push_back(s.ok() ? name : name + "!");
      if (!s.ok()) {
        EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
      }
    };
  }
  const std::vector<std::string>& log() const { return log_; }

 private:
  std::vector<std::string> log_;
};

using Log = std::vector<std::string>;
constexpr Priority kCkpt = Priority::kCheckpoint;
constexpr Priority kRestore = Priority::kRestore;

TEST(CreditLedgerTest, GrantsWithinTheBudget) {
  Recorder r;
  CreditLedger ledger(100);
  ledger.Request(1, kCkpt, 60, r.Cb("a"));
  ledger.Request(2, kCkpt, 50, r.Cb("b"));
  EXPECT_EQ(r.log(), Log({"a"}));
  EXPECT_EQ(ledger.in_flight_bytes(), 60u);
  EXPECT_EQ(ledger.in_flight_bytes(1), 60u);
  EXPECT_EQ(ledger.queue_depth(2), 1u);
  EXPECT_EQ(ledger.queue_depth(), 1u);
  EXPECT_TRUE(ledger.Release(1, 60).ok());
  EXPECT_EQ(r.log(), Log({"a", "b"}));
  EXPECT_EQ(ledger.in_flight_bytes(), 50u);
  EXPECT_EQ(ledger.in_flight_bytes(1), 0u);
  EXPECT_EQ(ledger.queue_depth(), 0u);
}

TEST(CreditLedgerTest, RestoreOutranksCheckpoint) {
  Recorder r;
  CreditLedger ledger(100);
  ledger.Request(1, kCkpt, 100, r.Cb("a"));
  ledger.Request(2, kCkpt, 60, r.Cb("ckpt"));
  ledger.Request(3, kRestore, 50, r.Cb("restore"));
  EXPECT_TRUE(ledger.Release(1, 100).ok());
  // The restore goes first; the checkpoint then waits, 60 > 50 free.
  EXPECT_EQ(r.log(), Log({"a", "restore"}));
  EXPECT_TRUE(ledger.Release(3, 50).ok());
  EXPECT_EQ(r.log(), Log({"a", "restore", "ckpt"}));
}

TEST(CreditLedgerTest, BackgroundWaitsBehindEveryClient) {
  Recorder r;
  CreditLedger ledger(100);
  ledger.Request(1, kCkpt, 100, r.Cb("a"));
  ledger.Request(9, Priority::kBackground, 10, r.Cb("background"));
  ledger.Request(2, kCkpt, 50, r.Cb("ckpt"));
  ledger.Request(3, kRestore, 40, r.Cb("restore"));
  EXPECT_EQ(ledger.queue_depth(), 3u);
  EXPECT_EQ(ledger.queue_depth(9), 1u);
  EXPECT_TRUE(ledger.Release(1, 100).ok());
  // Asked first, granted last: restore, then checkpoint, then background.
  EXPECT_EQ(r.log(), Log({"a", "restore", "ckpt", "background"}));
  // A removed background client's credit comes back.
  ledger.RemoveClient(9);
  EXPECT_EQ(ledger.in_flight_bytes(), 90u);
}

TEST(CreditLedgerTest, CheckpointsAreFairAcrossClients) {
  Recorder r;
  CreditLedger ledger(100);
  ledger.Request(1, kCkpt, 50, r.Cb("a0"));
  ledger.Request(1, kCkpt, 50, r.Cb("a1"));
  ledger.Request(1, kCkpt, 10, r.Cb("a2"));
  ledger.Request(1, kCkpt, 10, r.Cb("a3"));
  ledger.Request(2, kCkpt, 10, r.Cb("b0"));
  ledger.Request(2, kCkpt, 10, r.Cb("b1"));
  // Client 2 holds less, so it gets the freed 20 bytes although client 1
  // asked first.
  EXPECT_TRUE(ledger.Release(1, 20).ok());
  EXPECT_EQ(r.log(), Log({"a0", "a1", "b0", "b1"}));
  EXPECT_TRUE(ledger.Release(1, 10).ok());
  EXPECT_EQ(r.log(), Log({"a0", "a1", "b0", "b1", "a2"}));
  EXPECT_EQ(ledger.queue_depth(1), 1u);
}

TEST(CreditLedgerTest, LargeRequestIsNotOvertakenBySmallOnes) {
  Recorder r;
  CreditLedger ledger(100);
  ledger.Request(1, kCkpt, 90, r.Cb("a"));
  ledger.Request(2, kCkpt, 50, r.Cb("big"));
  ledger.Request(3, kCkpt, 5, r.Cb("small"));
  // 5 bytes would fit, but the older request of an equally idle client
  // comes first.
  EXPECT_EQ(r.log(), Log({"a"}));
  EXPECT_TRUE(ledger.Release(1, 90).ok());
  EXPECT_EQ(r.log(), Log({"a", "big", "small"}));
}

TEST(CreditLedgerTest, OversizedRequestGoesWhenNothingElseIsInFlight) {
  Recorder r;
  CreditLedger ledger(100);
  ledger.Request(1, kCkpt, 250, r.Cb("huge"));
  EXPECT_EQ(r.log(), Log({"huge"}));
  EXPECT_EQ(ledger.in_flight_bytes(), 250u);
  ledger.Request(2, kCkpt, 10, r.Cb("b"));
  EXPECT_EQ(r.log(), Log({"huge"}));
  EXPECT_TRUE(ledger.Release(1, 250).ok());
  EXPECT_EQ(r.log(), Log({"huge", "b"}));

  ledger.Request(3, kCkpt, 300, r.Cb("huge2"));
  EXPECT_EQ(r.log(), Log({"huge", "b"}));
  EXPECT_TRUE(ledger.Release(2, 10).ok());
  EXPECT_EQ(r.log(), Log({"huge", "b", "huge2"}));
}

TEST(CreditLedgerTest, ReleasingMoreThanHeldIsReported) {
  Recorder r;
  CreditLedger ledger(100);
  ledger.Request(1, kCkpt, 30, r.Cb("a"));
  Status s = ledger.Release(1, 40);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.in_flight_bytes(), 0u);
  EXPECT_EQ(ledger.Release(9, 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.in_flight_bytes(), 0u);
}

TEST(CreditLedgerTest, RemovedClientIsCancelledAndItsCreditReturned) {
  Recorder r;
  CreditLedger ledger(100);
  ledger.Request(1, kCkpt, 100, r.Cb("a0"));
  ledger.Request(1, kCkpt, 10, r.Cb("a1"));
  ledger.Request(2, kCkpt, 20, r.Cb("b"));
  ledger.RemoveClient(1);
  EXPECT_EQ(r.log(), Log({"a0", "a1!", "b"}));
  EXPECT_EQ(ledger.in_flight_bytes(), 20u);
  EXPECT_EQ(ledger.queue_depth(1), 0u);
}

TEST(CreditLedgerTest, DestructorCancelsQueuedRequests) {
  Recorder r;
  {
    CreditLedger ledger(10);
    ledger.Request(1, kCkpt, 10, r.Cb("a"));
    ledger.Request(2, kRestore, 10, r.Cb("b"));
  }
  EXPECT_EQ(r.log(), Log({"a", "b!"}));
}

TEST(CreditLedgerTest, CallbacksMayCallBackIn) {
  CreditLedger ledger(100);
  int granted = 0;
  ledger.Request(1, kCkpt, 100, [&](Status s) {
    ASSERT_TRUE(s.ok());
    ++granted;
    EXPECT_TRUE(ledger.Release(1, 100).ok());
  });
  ledger.Request(1, kCkpt, 0, [&](Status s) { granted += s.ok(); });
  EXPECT_EQ(granted, 2);
  EXPECT_EQ(ledger.in_flight_bytes(), 0u);
}

TEST(CreditLedgerTest, ConcurrentClientsNeverExceedTheBudget) {
  CreditLedger ledger(100);
  std::atomic<uint64_t> max_seen{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 300; ++i) {
        const uint64_t bytes = 1 + rng() % 50;
        const Priority cls = (i % 3 == 0) ? kRestore : kCkpt;
        absl::Notification granted;
        ledger.Request(t, cls, bytes, [&](Status s) {
          EXPECT_TRUE(s.ok());
          granted.Notify();
        });
        granted.WaitForNotification();
        uint64_t now = ledger.in_flight_bytes();
        uint64_t prev = max_seen.load();
        while (now > prev && !max_seen.compare_exchange_weak(prev, now)) {
        }
        EXPECT_TRUE(ledger.Release(t, bytes).ok());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_LE(max_seen.load(), 100u);
  EXPECT_EQ(ledger.in_flight_bytes(), 0u);
  EXPECT_EQ(ledger.queue_depth(), 0u);
}

}  // namespace
}  // namespace stagger::qos
