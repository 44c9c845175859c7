#include "client/placement.h"

#include <gtest/gtest.h>

namespace stagger::client {
namespace {

using V = std::vector<size_t>;

TEST(PlacementTest, FirstServersAreInDistinctDomains) {
  // a(x) b(x) c(y) d(z) -> a c d b
  EXPECT_EQ(SpreadOverDomains({"x", "x", "y", "z"}), (V{0, 2, 3, 1}));
  // Two domains of two: the second copy never shares the first's.
  EXPECT_EQ(SpreadOverDomains({"x", "x", "y", "y"}), (V{0, 2, 1, 3}));
  EXPECT_EQ(SpreadOverDomains({"y", "x", "x", "y"}), (V{0, 1, 2, 3}));
  // One domain: the ranking as it was.
  EXPECT_EQ(SpreadOverDomains({"x", "x", "x"}), (V{0, 1, 2}));
  EXPECT_EQ(SpreadOverDomains({}), V{});
}

TEST(PlacementTest, ServersWithoutADomainKeepTheirPlace) {
  EXPECT_EQ(SpreadOverDomains({"", "", "", ""}), (V{0, 1, 2, 3}));
  // Each is a domain of its own.
  EXPECT_EQ(SpreadOverDomains({"x", "", "x", ""}), (V{0, 1, 3, 2}));
}

}  // namespace
}  // namespace stagger::client
