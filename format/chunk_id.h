// ChunkId: the 128-bit xxh3 fingerprint of a chunk's decoded bytes. Chunks
// are content-addressed: the same bytes in one job are stored once.
#ifndef STAGGER_FORMAT_CHUNK_ID_H_
#define STAGGER_FORMAT_CHUNK_ID_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "stagger/status.h"

namespace stagger::format {

struct ChunkId {
  uint64_t hi = 0;
  uint64_t lo = 0;

  // The fingerprint (XXH3-128) of `data`.
  static ChunkId Of(const void* data, size_t len);
  // The same fingerprint, and the CRC32C of the same bytes in `*crc32c`,
  // taken in one pass: each block is checksummed while the hash has just
  // brought it into the cache, so the bytes are read from memory once.
  static ChunkId Of(const void* data, size_t len, uint32_t* crc32c);
  // Parses 32 lowercase/uppercase hex digits; INVALID_ARGUMENT otherwise.
  static Result<ChunkId> FromHex(std::string_view hex);
  // Parses the 16-byte big-endian form; INVALID_ARGUMENT on a wrong length.
  static Result<ChunkId> FromBytes(std::string_view bytes);

  std::string ToHex() const;    // 32 lowercase hex digits
  std::string ToBytes() const;  // 16 bytes, big-endian hi then lo

  friend bool operator==(const ChunkId& a, const ChunkId& b) {
    return a.hi == b.hi && a.lo == b.lo;
  }
  friend bool operator!=(const ChunkId& a, const ChunkId& b) {
    return !(a == b);
  }
  friend bool operator<(const ChunkId& a, const ChunkId& b) {
    return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ChunkId& id) {
    return H::combine(std::move(h), id.hi, id.lo);
  }
};

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_CHUNK_ID_H_
