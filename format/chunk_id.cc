#include "format/chunk_id.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include "absl/strings/str_format.h"
#include "format/internal/block_crc.h"
#include "format/internal/xxh3_avx2.h"

namespace stagger::format {
namespace {

int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

ChunkId ChunkId::Of(const void* data, size_t len) {
  if (internal::Xxh3Avx2Usable()) {
    ChunkId id;
    internal::Xxh3Avx2(data, len, &id.hi, &id.lo);
    return id;
  }
  XXH128_hash_t h = XXH3_128bits(data, len);
  return ChunkId{h.high64, h.low64};
}

ChunkId ChunkId::Of(const void* data, size_t len, uint32_t* crc32c) {
  // Small enough to stay in a core's cache between the two passes.
  constexpr size_t kBlock = 64 << 10;
  if (internal::Xxh3Avx2Usable()) {
    ChunkId id;
    internal::Xxh3Avx2WithCrc32c(data, len, kBlock, &id.hi, &id.lo, crc32c);
    return id;
  }
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  *crc32c = internal::UpdateWithCrc32c(
      data, len, kBlock,
      [&](const char* p, size_t n) { XXH3_128bits_update(&state, p, n); });
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  return ChunkId{h.high64, h.low64};
}

Result<ChunkId> ChunkId::FromHex(std::string_view hex) {
  if (hex.size() != 32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk id must be 32 hex digits, got '", AsAbsl(hex), "'"));
  }
  uint64_t v[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    int d = HexVal(hex[i]);
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk id has a non-hex digit: '", AsAbsl(hex), "'"));
    }
    v[i / 16] = (v[i / 16] << 4) | static_cast<uint64_t>(d);
  }
  return ChunkId{v[0], v[1]};
}

Result<ChunkId> ChunkId::FromBytes(std::string_view b) {
  if (b.size() != 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk id must be 16 bytes, got ", b.size()));
  }
  uint64_t v[2] = {0, 0};
  for (size_t i = 0; i < 16; ++i) {
    v[i / 8] = (v[i / 8] << 8) | static_cast<uint8_t>(b[i]);
  }
  return ChunkId{v[0], v[1]};
}

std::string ChunkId::ToHex() const {
  return absl::StrFormat("%016x%016x", hi, lo);
}

std::string ChunkId::ToBytes() const {
  std::string out(16, '\0');
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>(hi >> (56 - 8 * i));
    out[8 + i] = static_cast<char>(lo >> (56 - 8 * i));
  }
  return out;
}

}  // namespace stagger::format
