#include "format/internal/byte_group.h"

#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace stagger::format::internal {
namespace {

void GroupScalar(const char* x, const char* y, size_t from, size_t n, int w,
                 char* out) {
  for (size_t i = from; i < n; ++i) {
    for (int b = 0; b < w; ++b) {
      out[b * n + i] =
          static_cast<char>(x[i * w + b] ^ (y == nullptr ? 0 : y[i * w + b]));
    }
  }
}

void UngroupScalar(const char* in, const char* base, size_t from, size_t n,
                   int w, char* out) {
  for (size_t i = from; i < n; ++i) {
    for (int b = 0; b < w; ++b) {
      out[i * w + b] = static_cast<char>(
          in[b * n + i] ^ (base == nullptr ? 0 : base[i * w + b]));
    }
  }
}

#if defined(__SSE2__)

inline __m128i Load(const char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
inline void Store(char* p, __m128i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
}

// The even bytes of a then of b; the odd ones.
inline __m128i Even(__m128i a, __m128i b) {
  const __m128i low = _mm_set1_epi16(0x00ff);
  return _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low));
}
inline __m128i Odd(__m128i a, __m128i b) {
  return _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
}

// 16 elements of W bytes (W vectors in) to W planes of 16 bytes: halving
// the bytes of each element by even and odd positions, log2(W) times.
template <int W>
void GroupBlock(const __m128i* in, __m128i* planes);

template <>
void GroupBlock<2>(const __m128i* in, __m128i* p) {
  p[0] = Even(in[0], in[1]);
  p[1] = Odd(in[0], in[1]);
}

template <>
void GroupBlock<4>(const __m128i* in, __m128i* p) {
  // e: bytes 0 and 2 of each element, o: bytes 1 and 3.
  const __m128i e0 = Even(in[0], in[1]), e1 = Even(in[2], in[3]);
  const __m128i o0 = Odd(in[0], in[1]), o1 = Odd(in[2], in[3]);
  p[0] = Even(e0, e1);
  p[2] = Odd(e0, e1);
  p[1] = Even(o0, o1);
  p[3] = Odd(o0, o1);
}

template <>
void GroupBlock<8>(const __m128i* in, __m128i* p) {
  __m128i e[4], o[4];  // bytes 0,2,4,6 and 1,3,5,7 of 4 elements each
  for (int k = 0; k < 4; ++k) {
    e[k] = Even(in[2 * k], in[2 * k + 1]);
    o[k] = Odd(in[2 * k], in[2 * k + 1]);
  }
  // Of 8 elements each: ee bytes 0,4; eo 2,6; oe 1,5; oo 3,7.
  const __m128i ee0 = Even(e[0], e[1]), ee1 = Even(e[2], e[3]);
  const __m128i eo0 = Odd(e[0], e[1]), eo1 = Odd(e[2], e[3]);
  const __m128i oe0 = Even(o[0], o[1]), oe1 = Even(o[2], o[3]);
  const __m128i oo0 = Odd(o[0], o[1]), oo1 = Odd(o[2], o[3]);
  p[0] = Even(ee0, ee1);
  p[4] = Odd(ee0, ee1);
  p[2] = Even(eo0, eo1);
  p[6] = Odd(eo0, eo1);
  p[1] = Even(oe0, oe1);
  p[5] = Odd(oe0, oe1);
  p[3] = Even(oo0, oo1);
  p[7] = Odd(oo0, oo1);
}

// The inverse: W planes of 16 bytes to 16 elements (W vectors out), by
// interleaving bytes, then pairs, then quads.
template <int W>
void UngroupBlock(const __m128i* p, __m128i* out);

template <>
void UngroupBlock<2>(const __m128i* p, __m128i* out) {
  out[0] = _mm_unpacklo_epi8(p[0], p[1]);
  out[1] = _mm_unpackhi_epi8(p[0], p[1]);
}

template <>
void UngroupBlock<4>(const __m128i* p, __m128i* out) {
  // Bytes 0,1 and 2,3 of elements 0-7 (lo) and 8-15 (hi).
  const __m128i a0 = _mm_unpacklo_epi8(p[0], p[1]);
  const __m128i a1 = _mm_unpackhi_epi8(p[0], p[1]);
  const __m128i b0 = _mm_unpacklo_epi8(p[2], p[3]);
  const __m128i b1 = _mm_unpackhi_epi8(p[2], p[3]);
  out[0] = _mm_unpacklo_epi16(a0, b0);
  out[1] = _mm_unpackhi_epi16(a0, b0);
  out[2] = _mm_unpacklo_epi16(a1, b1);
  out[3] = _mm_unpackhi_epi16(a1, b1);
}

template <>
void UngroupBlock<8>(const __m128i* p, __m128i* out) {
  __m128i q[2][4];  // bytes 0-3 (q[0]) and 4-7 (q[1]) of 4 elements each
  for (int h = 0; h < 2; ++h) {
    const __m128i* s = p + 4 * h;
    const __m128i a0 = _mm_unpacklo_epi8(s[0], s[1]);
    const __m128i a1 = _mm_unpackhi_epi8(s[0], s[1]);
    const __m128i b0 = _mm_unpacklo_epi8(s[2], s[3]);
    const __m128i b1 = _mm_unpackhi_epi8(s[2], s[3]);
    q[h][0] = _mm_unpacklo_epi16(a0, b0);
    q[h][1] = _mm_unpackhi_epi16(a0, b0);
    q[h][2] = _mm_unpacklo_epi16(a1, b1);
    q[h][3] = _mm_unpackhi_epi16(a1, b1);
  }
  for (int k = 0; k < 4; ++k) {
    out[2 * k] = _mm_unpacklo_epi32(q[0][k], q[1][k]);
    out[2 * k + 1] = _mm_unpackhi_epi32(q[0][k], q[1][k]);
  }
}

template <int W>
void GroupSse2(const char* x, const char* y, size_t n, char* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i in[W], planes[W];
    for (int k = 0; k < W; ++k) {
      in[k] = Load(x + i * W + 16 * k);
      if (y != nullptr) in[k] = _mm_xor_si128(in[k], Load(y + i * W + 16 * k));
    }
    GroupBlock<W>(in, planes);
    for (int b = 0; b < W; ++b) Store(out + b * n + i, planes[b]);
  }
  GroupScalar(x, y, i, n, W, out);
}

template <int W>
void UngroupSse2(const char* in, const char* base, size_t n, char* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i planes[W], elems[W];
    for (int b = 0; b < W; ++b) planes[b] = Load(in + b * n + i);
    UngroupBlock<W>(planes, elems);
    for (int k = 0; k < W; ++k) {
      __m128i v = elems[k];
      if (base != nullptr) v = _mm_xor_si128(v, Load(base + i * W + 16 * k));
      Store(out + i * W + 16 * k, v);
    }
  }
  UngroupScalar(in, base, i, n, W, out);
}

#endif  // __SSE2__

}  // namespace

void GroupBytes(const char* x, const char* y, size_t n, int w, char* out) {
#if defined(__SSE2__)
  switch (w) {
    case 2:
      return GroupSse2<2>(x, y, n, out);
    case 4:
      return GroupSse2<4>(x, y, n, out);
    case 8:
      return GroupSse2<8>(x, y, n, out);
    default:
      break;
  }
#endif
  GroupScalar(x, y, 0, n, w, out);
}

void UngroupBytes(const char* in, const char* base, size_t n, int w,
                  char* out) {
#if defined(__SSE2__)
  switch (w) {
    case 2:
      return UngroupSse2<2>(in, base, n, out);
    case 4:
      return UngroupSse2<4>(in, base, n, out);
    case 8:
      return UngroupSse2<8>(in, base, n, out);
    default:
      break;
  }
#endif
  UngroupScalar(in, base, 0, n, w, out);
}

}  // namespace stagger::format::internal
