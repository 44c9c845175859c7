#include "client/staging_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STAGGER_STREAM_COPY 1
#endif

namespace stagger::client {
namespace {

#ifdef STAGGER_STREAM_COPY
// 128 bytes per step: four unaligned 32-byte loads, four aligned streaming
// stores. The head up to the first 32-byte boundary of `dst` and the tail
// go through memcpy.
__attribute__((target("avx2"))) void StreamCopy(char* dst, const char* src,
                                                size_t len) {
  size_t head = (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31;
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 128 <= len; i += 128) {
    const auto* s = reinterpret_cast<const __m256i*>(src + i);
    auto* d = reinterpret_cast<__m256i*>(dst + i);
    __m256i a = _mm256_loadu_si256(s);
    __m256i b = _mm256_loadu_si256(s + 1);
    __m256i c = _mm256_loadu_si256(s + 2);
    __m256i e = _mm256_loadu_si256(s + 3);
    _mm256_stream_si256(d, a);
    _mm256_stream_si256(d + 1, b);
    _mm256_stream_si256(d + 2, c);
    _mm256_stream_si256(d + 3, e);
  }
  std::memcpy(dst + i, src + i, len - i);
  // Streaming stores are weakly ordered: fence them before the caller
  // hands the slab to another thread.
  _mm_sfence();
}

// Whether copies of kStreamCopyMin bytes or more stream on this CPU.
bool Streams() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#endif

}  // namespace

void CopyToStaging(void* dst, const void* src, size_t len) {
#ifdef STAGGER_STREAM_COPY
  if (len >= kStreamCopyMin && Streams()) {
    StreamCopy(static_cast<char*>(dst), static_cast<const char*>(src), len);
    return;
  }
#endif
  std::memcpy(dst, src, len);
}

}  // namespace stagger::client
