// The one-pass loop behind ChunkId::Of(data, len, &crc32c), shared by the
// library's XXH3 and the AVX2 build (xxh3_avx2.cc).
#ifndef STAGGER_FORMAT_INTERNAL_BLOCK_CRC_H_
#define STAGGER_FORMAT_INTERNAL_BLOCK_CRC_H_

#include <cstddef>
#include <cstdint>

#include "format/crc32c.h"

namespace stagger::format::internal {

// Calls update(block_start, block_len) over `data` in blocks of `block`
// bytes, checksumming each block right after `update` has read it into
// cache, and returns the CRC32C of all `len` bytes.
template <typename Update>
uint32_t UpdateWithCrc32c(const void* data, size_t len, size_t block,
                          Update&& update) {
  const char* p = static_cast<const char*>(data);
  uint32_t crc = 0;
  for (size_t done = 0; done < len;) {
    const size_t n = len - done < block ? len - done : block;
    update(p + done, n);
    crc = Crc32cExtend(crc, p + done, n);
    done += n;
  }
  return crc;
}

}  // namespace stagger::format::internal

#endif  // STAGGER_FORMAT_INTERNAL_BLOCK_CRC_H_
