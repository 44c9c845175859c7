#include "format/internal/xxh3_avx2.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "format/internal/block_crc.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

// Only what follows is built for AVX2: xxhash's functions, inlined and
// static here (XXH_INLINE_ALL), and the two wrappers. Everything included
// above keeps the baseline target, so no shared inline function can end up
// with AVX2 code in it.
#pragma GCC push_options
#pragma GCC target("avx2")
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

namespace stagger::format::internal {

void Xxh3Avx2(const void* data, size_t len, uint64_t* hi, uint64_t* lo) {
  XXH128_hash_t h = XXH3_128bits(data, len);
  *hi = h.high64;
  *lo = h.low64;
}

void Xxh3Avx2WithCrc32c(const void* data, size_t len, size_t block,
                        uint64_t* hi, uint64_t* lo, uint32_t* crc32c) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  *crc32c = UpdateWithCrc32c(data, len, block, [&](const char* p, size_t n) {
    XXH3_128bits_update(&state, p, n);
  });
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  *hi = h.high64;
  *lo = h.low64;
}

}  // namespace stagger::format::internal

#pragma GCC pop_options

namespace stagger::format::internal {

bool Xxh3Avx2Usable() {
  static const bool usable = __builtin_cpu_supports("avx2");
  return usable;
}

}  // namespace stagger::format::internal

#else  // not x86-64 built by GCC: the library's build only

namespace stagger::format::internal {

bool Xxh3Avx2Usable() { return false; }
void Xxh3Avx2(const void*, size_t, uint64_t*, uint64_t*) { __builtin_trap(); }
void Xxh3Avx2WithCrc32c(const void*, size_t, size_t, uint64_t*, uint64_t*,
                        uint32_t*) {
  __builtin_trap();
}

}  // namespace stagger::format::internal

#endif
