// The deterministic state the multi-process tests save and check.
#ifndef STAGGER_TESTS_TESTUTIL_PATTERN_H_
#define STAGGER_TESTS_TESTUTIL_PATTERN_H_

#include <cstdint>
#include <vector>

namespace stagger::testutil {

// Fills `buf` with bytes that depend on `seed`: float-like words with
// varied low bytes and steady high bytes, so they compress somewhat.
inline void FillPattern(std::vector<char>& buf, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < buf.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (size_t k = 0; k < 8 && i + k < buf.size(); ++k) {
      buf[i + k] =
          static_cast<char>(k < 4 ? (x >> (8 * k)) : (k == 7 ? 0x3c : 0));
    }
  }
}

// Seeds of the two tensors a test rank saves for (rank, step).
inline uint64_t WeightSeed(uint32_t rank, int64_t step) {
  return rank * 1000003ull + static_cast<uint64_t>(step);
}
inline uint64_t BiasSeed(uint32_t rank, int64_t step) {
  return WeightSeed(rank, step) + 7;
}

}  // namespace stagger::testutil

#endif  // STAGGER_TESTS_TESTUTIL_PATTERN_H_
