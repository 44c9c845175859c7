// Little-endian fixed-width encoding helpers for on-disk and wire layouts.
#ifndef STAGGER_FORMAT_INTERNAL_ENDIAN_H_
#define STAGGER_FORMAT_INTERNAL_ENDIAN_H_

#include <cstdint>
#include <cstring>

namespace stagger::format_internal {

template <typename T>
inline void PutLE(char* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    p[i] = static_cast<char>(static_cast<uint64_t>(v) >> (8 * i));
  }
}

template <typename T>
inline T GetLE(const char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  }
  return static_cast<T>(v);
}

}  // namespace stagger::format_internal

#endif  // STAGGER_FORMAT_INTERNAL_ENDIAN_H_
