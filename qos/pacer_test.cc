#include "qos/pacer.h"

#include <gtest/gtest.h>

#include "qos/clock.h"

namespace stagger::qos {
namespace {

constexpr uint64_t kMB = 1'000'000;

TEST(DeadlinePacerTest, NotStartedLetsEverythingThrough) {
  DeadlinePacer p;
  EXPECT_FALSE(p.started());
  EXPECT_EQ(p.RateBps(0), DeadlinePacer::kUnlimited);
  EXPECT_EQ(p.Reserve(5, 100 * kMB), 5);
}

TEST(DeadlinePacerTest, SpreadsBytesEvenlyUpToTheDeadline) {
  DeadlinePacer p;
  p.Start(0, 100 * kMB, kSec, 0, 0);
  EXPECT_DOUBLE_EQ(p.RateBps(0), 100e6);
  // A sender that books ahead gets a start time every 10 ms.
  for (int k = 0; k < 100; ++k) {
    EXPECT_EQ(p.Reserve(0, kMB), k * 10 * kMs) << "chunk " << k;
  }
  EXPECT_EQ(p.sent_bytes(), 100 * kMB);
  EXPECT_DOUBLE_EQ(p.last_rate_Bps(), 100e6);
  // Everything announced is booked and there is no floor.
  EXPECT_EQ(p.RateBps(990 * kMs), 0);
}

TEST(DeadlinePacerTest, RateRisesWhenTheSenderFellBehind) {
  DeadlinePacer p;
  p.Start(0, 100 * kMB, kSec, 0, 0);
  EXPECT_EQ(p.Reserve(0, kMB), 0);
  // Half the time is gone with 99 MB left.
  EXPECT_DOUBLE_EQ(p.RateBps(500 * kMs), 198e6);
  EXPECT_EQ(p.Reserve(500 * kMs, 99 * kMB / 2), 500 * kMs);
  EXPECT_DOUBLE_EQ(p.last_rate_Bps(), 198e6);
  // 49.5 MB at 198 MB/s take 250 ms.
  EXPECT_EQ(p.Reserve(500 * kMs, kMB), 750 * kMs);
}

TEST(DeadlinePacerTest, IdleTimeEarnsNoBurst) {
  DeadlinePacer p;
  p.Start(0, 100 * kMB, kSec, 0, 0);
  EXPECT_EQ(p.Reserve(0, kMB), 0);
  // Back after 100 ms: this chunk goes now, the next one a chunk-time later
  // at the new rate (99 MB over 900 ms = 110 MB/s: 1 MB every 9.0909 ms).
  EXPECT_EQ(p.Reserve(100 * kMs, kMB), 100 * kMs);
  EXPECT_EQ(p.Reserve(100 * kMs, kMB), 100 * kMs + 9'090'909);
}

TEST(DeadlinePacerTest, CapAndFloorBoundTheRate) {
  DeadlinePacer capped;
  capped.Start(0, 100 * kMB, kSec, 0, 50e6);
  EXPECT_DOUBLE_EQ(capped.RateBps(0), 50e6);
  EXPECT_EQ(capped.Reserve(0, kMB), 0);
  EXPECT_EQ(capped.Reserve(0, kMB), 20 * kMs);

  DeadlinePacer floored;
  floored.Start(0, 10 * kMB, kSec, 100e6, 0);
  EXPECT_DOUBLE_EQ(floored.RateBps(0), 100e6);
  EXPECT_EQ(floored.Reserve(0, kMB), 0);
  EXPECT_EQ(floored.Reserve(0, kMB), 10 * kMs);

  // The cap wins over a higher floor.
  DeadlinePacer both;
  both.Start(0, 10 * kMB, kSec, 100e6, 20e6);
  EXPECT_DOUBLE_EQ(both.RateBps(0), 20e6);
}

TEST(DeadlinePacerTest, PastOrWithoutDeadlineUsesTheCap) {
  DeadlinePacer p;
  p.Start(0, 100 * kMB, kSec, 0, 50e6);
  EXPECT_DOUBLE_EQ(p.RateBps(2 * kSec), 50e6);
  DeadlinePacer uncapped;
  uncapped.Start(0, 100 * kMB, kSec, 0, 0);
  EXPECT_EQ(uncapped.RateBps(2 * kSec), DeadlinePacer::kUnlimited);
  EXPECT_EQ(uncapped.Reserve(2 * kSec, kMB), 2 * kSec);
  EXPECT_EQ(uncapped.Reserve(2 * kSec, kMB), 2 * kSec);

  DeadlinePacer none;
  none.Start(0, 100 * kMB, /*deadline_ns=*/0, 0, 0);
  EXPECT_EQ(none.RateBps(0), DeadlinePacer::kUnlimited);
  EXPECT_EQ(none.Reserve(0, kMB), 0);
  EXPECT_EQ(none.Reserve(0, kMB), 0);
}

TEST(DeadlinePacerTest, BytesBeyondTheTotalArePacedAsTheLast) {
  DeadlinePacer p;
  p.Start(0, kMB, kSec, 0, 0);
  EXPECT_EQ(p.Reserve(0, kMB), 0);  // 1 MB over 1 s
  // A megabyte beyond the total starts when the first is done, at the
  // deadline; from there on, without a cap, nothing is delayed.
  EXPECT_EQ(p.Reserve(0, kMB), kSec);
  EXPECT_EQ(p.Reserve(0, kMB), kSec);
  DeadlinePacer q;
  q.Start(0, kMB, kSec, 0, 0);
  EXPECT_EQ(q.Reserve(500 * kMs, 2 * kMB), 500 * kMs);
  // 2 MB over the 500 ms left.
  EXPECT_DOUBLE_EQ(q.last_rate_Bps(), 4e6);
}

TEST(DeadlinePacerTest, StartReplacesTheSchedule) {
  DeadlinePacer p;
  p.Start(0, 100 * kMB, kSec, 0, 0);
  EXPECT_EQ(p.Reserve(0, 50 * kMB), 0);
  p.Start(2 * kSec, 10 * kMB, 3 * kSec, 0, 0);
  EXPECT_EQ(p.sent_bytes(), 0u);
  EXPECT_EQ(p.total_bytes(), 10 * kMB);
  EXPECT_EQ(p.deadline_ns(), 3 * kSec);
  EXPECT_EQ(p.Reserve(2 * kSec, kMB), 2 * kSec);
  EXPECT_EQ(p.Reserve(2 * kSec, kMB), 2 * kSec + 100 * kMs);
}

}  // namespace
}  // namespace stagger::qos

namespace stagger::qos {
namespace {

TEST(DeadlinePacerCreditTest, CreditLetsAnAbsentSenderCatchUpBoundedly) {
  constexpr int64_t kMsec = 1'000'000;
  constexpr uint64_t k10MB = 10'000'000;
  DeadlinePacer p;
  p.set_max_credit_ns(200 * kMsec);
  p.Start(0, 0, 0, 0, 100e6);  // no deadline, capped at 100 MB/s
  EXPECT_EQ(p.Reserve(0, k10MB), 0);
  // Away until 1 s (e.g. the gate was closed): 200 ms of credit, i.e.
  // two more 10 MB pieces at once, then the schedule again.
  EXPECT_EQ(p.Reserve(1000 * kMsec, k10MB), 1000 * kMsec);
  EXPECT_EQ(p.Reserve(1000 * kMsec, k10MB), 1000 * kMsec);
  EXPECT_EQ(p.Reserve(1000 * kMsec, k10MB), 1000 * kMsec);
  EXPECT_EQ(p.Reserve(1000 * kMsec, k10MB), 1100 * kMsec);

  DeadlinePacer strict;  // no credit: the schedule restarts at 1 s
  strict.Start(0, 0, 0, 0, 100e6);
  EXPECT_EQ(strict.Reserve(0, k10MB), 0);
  EXPECT_EQ(strict.Reserve(1000 * kMsec, k10MB), 1000 * kMsec);
  EXPECT_EQ(strict.Reserve(1000 * kMsec, k10MB), 1100 * kMsec);
}

}  // namespace
}  // namespace stagger::qos
