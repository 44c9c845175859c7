#include "format/crc32c.h"

#include <array>
#include <cstring>

namespace stagger::format {
namespace {

constexpr uint32_t kPoly = 0x82f63b78;  // reflected Castagnoli polynomial

// Slice-by-8 tables, built once at static-init time.
struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s)
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};
const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

uint32_t ExtendPortable(uint32_t crc, const uint8_t* p, size_t n) {
  const Tables& tb = GetTables();
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= crc;
    crc = tb.t[7][v & 0xff] ^ tb.t[6][(v >> 8) & 0xff] ^
          tb.t[5][(v >> 16) & 0xff] ^ tb.t[4][(v >> 24) & 0xff] ^
          tb.t[3][(v >> 32) & 0xff] ^ tb.t[2][(v >> 40) & 0xff] ^
          tb.t[1][(v >> 48) & 0xff] ^ tb.t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ tb.t[0][(crc ^ *p++) & 0xff];
  return crc;
}

// Operators that append zero bytes to a CRC register, as GF(2) 32x32
// matrices; used to combine CRCs of three interleaved streams.
uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  while (vec) {
    if (vec & 1) sum ^= *mat;
    vec >>= 1;
    ++mat;
  }
  return sum;
}

void Gf2Square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2Times(mat, mat[n]);
}

// Table of the operator that appends `len` (a power of two) zero bytes.
struct ZerosTable {
  uint32_t t[4][256];
  explicit ZerosTable(size_t len) {
    uint32_t even[32], odd[32];
    odd[0] = kPoly;  // operator for one zero bit
    uint32_t row = 1;
    for (int n = 1; n < 32; ++n) {
      odd[n] = row;
      row <<= 1;
    }
    Gf2Square(even, odd);  // two zero bits
    Gf2Square(odd, even);  // four zero bits
    const uint32_t* op = nullptr;
    for (;;) {
      Gf2Square(even, odd);  // first pass: one zero byte
      len >>= 1;
      if (len == 0) {
        op = even;
        break;
      }
      Gf2Square(odd, even);
      len >>= 1;
      if (len == 0) {
        op = odd;
        break;
      }
    }
    for (uint32_t n = 0; n < 256; ++n) {
      t[0][n] = Gf2Times(op, n);
      t[1][n] = Gf2Times(op, n << 8);
      t[2][n] = Gf2Times(op, n << 16);
      t[3][n] = Gf2Times(op, n << 24);
    }
  }
  uint32_t Shift(uint32_t crc) const {
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^
           t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
  }
};

#if defined(__x86_64__)
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;

// Consumes as many 3 x kBlock runs of `*p` as `*n` holds: three streams,
// then their CRCs combined with the zero-append operator for kBlock bytes.
template <size_t kBlock>
__attribute__((target("sse4.2"))) void ThreeStreams(uint64_t* crc,
                                                    const uint8_t** p,
                                                    size_t* n,
                                                    const ZerosTable& shift) {
  while (*n >= 3 * kBlock) {
    const uint8_t* q = *p;
    uint64_t c0 = *crc, c1 = 0, c2 = 0;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t a, b, c;
      std::memcpy(&a, q + i, 8);
      std::memcpy(&b, q + kBlock + i, 8);
      std::memcpy(&c, q + 2 * kBlock + i, 8);
      c0 = __builtin_ia32_crc32di(c0, a);
      c1 = __builtin_ia32_crc32di(c1, b);
      c2 = __builtin_ia32_crc32di(c2, c);
    }
    c0 = shift.Shift(static_cast<uint32_t>(c0)) ^ c1;
    *crc = shift.Shift(static_cast<uint32_t>(c0)) ^ c2;
    *p += 3 * kBlock;
    *n -= 3 * kBlock;
  }
}

// The crc32 instruction has a latency of three cycles and a throughput of
// one per cycle: three independent streams keep it busy.
__attribute__((target("sse4.2"))) uint32_t ExtendHw(uint32_t crc,
                                                    const uint8_t* p,
                                                    size_t n) {
  static const ZerosTable long_shift(kLong);
  static const ZerosTable short_shift(kShort);
  uint64_t c0 = crc;
  ThreeStreams<kLong>(&c0, &p, &n, long_shift);
  ThreeStreams<kShort>(&c0, &p, &n, short_shift);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c0 = __builtin_ia32_crc32di(c0, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c0);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
bool HaveHw() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t len) {
  return ~ExtendPortable(~crc, static_cast<const uint8_t*>(data), len);
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (HaveHw()) return ~ExtendHw(crc, p, len);
#endif
  return ~ExtendPortable(crc, p, len);
}

}  // namespace stagger::format
