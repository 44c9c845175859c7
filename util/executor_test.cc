#include "util/executor.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/synchronization/notification.h"

namespace stagger {
namespace {

TEST(ExecutorTest, RunsEveryTaskBeforeDestruction) {
  std::atomic<int> sum{0};
  {
    Executor ex(3);
    for (int i = 1; i <= 1000; ++i) ex.Submit([&sum, i] { sum += i; });
  }
  EXPECT_EQ(sum.load(), 500500);
}

TEST(ExecutorTest, SingleThreadKeepsFifoOrder) {
  std::vector<int> order;
  {
    Executor ex(1);
    absl::Notification started, gate;
    ex.Submit([&] {
      started.Notify();
      gate.WaitForNotification();
    });
    started.WaitForNotification();
    for (int i = 0; i < 5; ++i) ex.Submit([&order, i] { order.push_back(i); });
    EXPECT_EQ(ex.queued(), 5u);
    gate.Notify();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace stagger
