// CRC-32C (Castagnoli), the checksum of every chunk record. Uses the SSE4.2
// instruction where the CPU has it, a table otherwise; both give the same
// value. Thread-safe, no state.
#ifndef STAGGER_FORMAT_CRC32C_H_
#define STAGGER_FORMAT_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace stagger::format {

// Extends `crc` (0 for a fresh checksum) over `data`.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len);

// The table-driven implementation alone (for tests and comparison).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t len);

inline uint32_t Crc32c(const void* data, size_t len) {
  return Crc32cExtend(0, data, len);
}

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_CRC32C_H_
