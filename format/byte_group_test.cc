#include "format/internal/byte_group.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace stagger::format::internal {
namespace {

std::vector<char> Random(size_t n, uint32_t seed) {
  std::mt19937 r(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(r());
  return v;
}

// Every width, counts around the 16-element blocks and odd ones, with and
// without the XOR operand, against the definition byte by byte; the
// inverse gives the elements back, also in place over the base.
TEST(ByteGroupTest, MatchesTheDefinitionForEveryWidthAndCount) {
  for (int w : {1, 2, 3, 4, 8}) {
    for (size_t n : {0, 1, 15, 16, 17, 31, 32, 33, 100, 1027}) {
      SCOPED_TRACE(testing::Message() << "w=" << w << " n=" << n);
      const std::vector<char> x = Random(n * w, 7 * w + n);
      const std::vector<char> y = Random(n * w, 11 * w + n);
      for (const char* other : {static_cast<const char*>(nullptr), y.data()}) {
        std::vector<char> want(n * w), got(n * w, 0x5a);
        for (size_t i = 0; i < n; ++i) {
          for (int b = 0; b < w; ++b) {
            want[b * n + i] = static_cast<char>(
                x[i * w + b] ^ (other == nullptr ? 0 : other[i * w + b]));
          }
        }
        GroupBytes(x.data(), other, n, w, got.data());
        ASSERT_EQ(got, want) << (other ? "xor" : "plain");

        std::vector<char> back(n * w, 0x5a);
        UngroupBytes(got.data(), other, n, w, back.data());
        ASSERT_EQ(back, x);
        if (other != nullptr) {
          std::vector<char> in_place = y;
          UngroupBytes(got.data(), in_place.data(), n, w, in_place.data());
          ASSERT_EQ(in_place, x);
        }
      }
    }
  }
}

// Elements whose bytes differ by position: a transpose that swapped two
// planes, or two elements, shows.
TEST(ByteGroupTest, PlanesHoldTheirOwnByteOfEachElement) {
  const size_t n = 48;
  for (int w : {2, 4, 8}) {
    std::vector<char> x(n * w);
    for (size_t i = 0; i < n; ++i) {
      for (int b = 0; b < w; ++b) x[i * w + b] = static_cast<char>(b * 64 + i);
    }
    std::vector<char> g(n * w);
    GroupBytes(x.data(), nullptr, n, w, g.data());
    for (int b = 0; b < w; ++b) {
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(g[b * n + i], static_cast<char>(b * 64 + i))
            << "w=" << w << " plane " << b << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace stagger::format::internal
