// IngestAdmission on its own: class order, fairness, oversized requests,
// gone peers and the books it reports.
#include "server/ingest_admission.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace stagger::server {
namespace {

// Records the order in which grants run.
class Grants {
 public:
  std::function<void()> Make(std::string label) {
    return [this, label] { order_.push_back(label); };
  }
  const std::vector<std::string>& order() const { return order_; }

 private:
  std::vector<std::string> order_;
};

TEST(IngestAdmissionTest, RestoreOutranksQueuedCheckpoints) {
  IngestAdmission adm(100);
  Grants g;
  adm.Request(1, 100, g.Make("ckpt1"));
  adm.Request(2, 60, g.Make("ckpt2"));
  adm.RequestRestore(3, 60, g.Make("restore3"));
  EXPECT_EQ(g.order(), std::vector<std::string>{"ckpt1"});
  AdmissionStats s = adm.Stats();
  EXPECT_EQ(s.in_flight_bytes, 100u);
  EXPECT_EQ(s.queue_depth, 2u);
  EXPECT_EQ(s.restore_queue_depth, 1u);

  adm.Release(1, 100);
  // The read goes first although the put asked earlier; the put waits
  // until the read's bytes come back.
  EXPECT_EQ(g.order(), (std::vector<std::string>{"ckpt1", "restore3"}));
  adm.Release(3, 60);
  EXPECT_EQ(g.order(),
            (std::vector<std::string>{"ckpt1", "restore3", "ckpt2"}));
  s = adm.Stats();
  EXPECT_EQ(s.restore_grants, 1u);
  EXPECT_EQ(s.checkpoint_grants, 2u);
  adm.Release(2, 60);
  EXPECT_TRUE(adm.AwaitIdle(absl::ZeroDuration()));
}

TEST(IngestAdmissionTest, ClientsAlternateWhenBothHaveWork) {
  IngestAdmission adm(20);
  Grants g;
  adm.Request(9, 20, g.Make("hold"));
  for (int i = 0; i < 4; ++i) adm.Request(1, 10, g.Make("A"));
  for (int i = 0; i < 4; ++i) adm.Request(2, 10, g.Make("B"));
  EXPECT_EQ(adm.Stats().queue_depth, 8u);
  adm.Release(9, 20);
  // Two fit at once; each release goes to the client with less in flight.
  EXPECT_EQ(g.order(), (std::vector<std::string>{"hold", "A", "B"}));
  for (int round = 0; round < 3; ++round) {
    adm.Release(1, 10);
    adm.Release(2, 10);
  }
  EXPECT_EQ(g.order(), (std::vector<std::string>{"hold", "A", "B", "A", "B",
                                                 "A", "B", "A", "B"}));
  AdmissionStats s = adm.Stats();
  ASSERT_EQ(s.clients.size(), 2u);
  EXPECT_EQ(s.clients[1].in_flight_bytes, 10u);
  EXPECT_EQ(s.clients[2].in_flight_bytes, 10u);
  EXPECT_EQ(s.clients[1].queued, 0u);
}

TEST(IngestAdmissionTest, RequestLargerThanTheBudgetIsGrantedWhenAlone) {
  IngestAdmission adm(10);
  Grants g;
  adm.Request(1, 5, g.Make("small"));
  adm.Request(2, 100, g.Make("huge"));
  EXPECT_EQ(g.order(), std::vector<std::string>{"small"});
  adm.Release(1, 5);
  EXPECT_EQ(g.order(), (std::vector<std::string>{"small", "huge"}));
  EXPECT_EQ(adm.Stats().in_flight_bytes, 100u);
  adm.Request(1, 1, g.Make("after"));
  EXPECT_EQ(g.order().size(), 2u);  // over budget until the huge one is back
  adm.Release(2, 100);
  EXPECT_EQ(g.order().back(), "after");
}

TEST(IngestAdmissionTest, GonePeerKeepsItsChargeAndLosesItsQueue) {
  IngestAdmission adm(100);
  Grants g;
  adm.Request(1, 60, g.Make("p1-first"));
  adm.Request(1, 60, g.Make("p1-second"));
  adm.Request(2, 50, g.Make("p2"));
  adm.PeerGone(1);
  // Its 60 bytes are still in memory (being written): still charged.
  AdmissionStats s = adm.Stats();
  EXPECT_EQ(s.in_flight_bytes, 60u);
  EXPECT_EQ(s.clients[1].in_flight_bytes, 60u);
  // New requests of a gone peer are dropped.
  adm.Request(1, 1, g.Make("p1-late"));
  EXPECT_EQ(adm.Stats().queue_depth, 2u);

  adm.Release(1, 60);
  EXPECT_EQ(g.order(), (std::vector<std::string>{"p1-first", "p2"}));
  s = adm.Stats();
  EXPECT_EQ(s.in_flight_bytes, 50u);
  EXPECT_EQ(s.queue_depth, 0u);
  EXPECT_EQ(s.clients.count(1), 0u);
  adm.Release(2, 50);
  EXPECT_TRUE(adm.AwaitIdle(absl::ZeroDuration()));
}

TEST(IngestAdmissionTest, GrantForAGonePeerGoesStraightBack) {
  IngestAdmission adm(100);
  Grants g;
  adm.Request(9, 80, g.Make("hold"));
  adm.Request(1, 10, g.Make("p1-first"));
  adm.Request(1, 20, g.Make("p1-second"));  // does not fit: queued
  adm.PeerGone(1);                          // 10 bytes still charged
  adm.Release(9, 80);  // the ledger grants p1-second: nobody takes it
  EXPECT_EQ(g.order(), (std::vector<std::string>{"hold", "p1-first"}));
  AdmissionStats s = adm.Stats();
  EXPECT_EQ(s.in_flight_bytes, 10u);
  EXPECT_EQ(s.queue_depth, 0u);
  // The credit really is free again.
  adm.Request(2, 90, g.Make("p2"));
  EXPECT_EQ(g.order().back(), "p2");
  adm.Release(1, 10);
  adm.Release(2, 90);
  EXPECT_TRUE(adm.AwaitIdle(absl::ZeroDuration()));
}

TEST(IngestAdmissionTest, LongChainOfGrantsGivenBackDoesNotRecurse) {
  // Each grant to the gone peer is released inside the previous release;
  // without the trampoline this would nest once per queued request.
  constexpr int kQueued = 200000;
  IngestAdmission adm(2);
  Grants g;
  adm.Request(1, 1, g.Make("p1"));
  adm.Request(9, 1, g.Make("hold"));
  for (int i = 0; i < kQueued; ++i) adm.Request(1, 1, [] {});
  EXPECT_EQ(adm.Stats().queue_depth, static_cast<size_t>(kQueued));
  adm.PeerGone(1);
  adm.Release(9, 1);
  AdmissionStats s = adm.Stats();
  EXPECT_EQ(s.queue_depth, 0u);
  EXPECT_EQ(s.in_flight_bytes, 1u);
  adm.Release(1, 1);
  EXPECT_TRUE(adm.AwaitIdle(absl::ZeroDuration()));
}

TEST(IngestAdmissionTest, DestructionDropsQueuedGrantsUnrun) {
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  bool ran = false;
  {
    IngestAdmission adm(10);
    adm.Request(1, 10, [] {});
    adm.Request(2, 10, [&ran, alive] { ran = true; });
    alive.reset();
    EXPECT_FALSE(watch.expired());  // held by the queued grant
  }
  EXPECT_FALSE(ran);
  EXPECT_TRUE(watch.expired());
}

TEST(IngestAdmissionTest, ReleaseFromInsideAGrantIsFine) {
  IngestAdmission adm(10);
  int granted = 0;
  adm.Request(9, 10, [] {});
  for (int i = 0; i < 3; ++i) {
    adm.Request(1, 10, [&] {
      ++granted;
      adm.Release(1, 10);
    });
  }
  adm.Release(9, 10);
  EXPECT_EQ(granted, 3);
  EXPECT_TRUE(adm.AwaitIdle(absl::ZeroDuration()));
}

}  // namespace
}  // namespace stagger::server
