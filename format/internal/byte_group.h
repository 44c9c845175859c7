// Byte grouping of fixed-width elements (the "shuffle" float codecs run
// before zstd): byte b of every element side by side, then byte b + 1.
// With x86-64's SSE2 (the baseline) 16 elements move per step through
// unpack and pack instructions; elsewhere, and for the tail, byte by byte.
#ifndef STAGGER_FORMAT_INTERNAL_BYTE_GROUP_H_
#define STAGGER_FORMAT_INTERNAL_BYTE_GROUP_H_

#include <cstddef>

namespace stagger::format::internal {

// out[b * n + i] = x[i * w + b] ^ y[i * w + b] for the n elements of width
// w (y == nullptr: x alone). Any w >= 1; 2, 4 and 8 are the fast ones.
void GroupBytes(const char* x, const char* y, size_t n, int w, char* out);

// The inverse: out[i * w + b] = in[b * n + i] ^ base[i * w + b]
// (base == nullptr: in alone). `out` must not overlap `in`; it may be
// `base`.
void UngroupBytes(const char* in, const char* base, size_t n, int w, char* out);

}  // namespace stagger::format::internal

#endif  // STAGGER_FORMAT_INTERNAL_BYTE_GROUP_H_
