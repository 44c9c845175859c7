#include "client/staging_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace stagger::client {
namespace {

TEST(StagingCopyTest, CopiesEveryByteAtAnyAlignment) {
  // Around the streaming threshold and its 128-byte steps, with source and
  // destination off every alignment the streaming loop cares about.
  const size_t max_len = kStreamCopyMin + 4096;
  std::string src(max_len + 64, '\0');
  std::mt19937 rng(5);
  for (auto& c : src) c = static_cast<char>(rng());
  std::vector<char> dst(max_len + 128);
  for (size_t len :
       {0ul, 1ul, 127ul, 4096ul, kStreamCopyMin - 1, kStreamCopyMin,
        kStreamCopyMin + 1, kStreamCopyMin + 127, kStreamCopyMin + 4095}) {
    for (size_t src_off : {0ul, 1ul, 31ul}) {
      for (size_t dst_off : {0ul, 1ul, 17ul, 32ul, 63ul}) {
        std::fill(dst.begin(), dst.end(), '\x5a');
        CopyToStaging(dst.data() + dst_off, src.data() + src_off, len);
        ASSERT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, len),
                  0)
            << "len " << len << " src+" << src_off << " dst+" << dst_off;
        // Nothing written outside [dst_off, dst_off + len).
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], '\x5a');
        for (size_t i = dst_off + len; i < dst.size(); ++i) {
          ASSERT_EQ(dst[i], '\x5a') << "len " << len << " byte " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace stagger::client
