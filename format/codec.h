// Chunk codecs: how a chunk's bytes are encoded in its record payload.
// Stateless and thread-safe.
#ifndef STAGGER_FORMAT_CODEC_H_
#define STAGGER_FORMAT_CODEC_H_

#include <string>
#include <string_view>

#include "format/record.h"
#include "stagger/status.h"

namespace stagger::format {

struct EncodeOptions {
  int zstd_level = 1;
  // EncodeDelta may use kNumDeltaByteGroupZstd (false: XOR only, for a
  // reader that does not know it).
  bool numeric_delta = true;
  // Element width for kByteGroupZstd: 2 (bf16, f16), 4 (f32) or 8 (f64).
  int element_size = 4;
};

// Encodes `raw` with `codec` into `out` (replaced). When the encoded form
// is not smaller, returns kRaw and the raw bytes instead: the returned codec
// is the one actually used. INVALID_ARGUMENT for an element size other than
// 2, 4 or 8 with kByteGroupZstd.
Result<Codec> Encode(Codec codec, std::string_view raw, std::string* out,
                     const EncodeOptions& options = {});

// Encodes `raw` as a delta against `base` (same length, chunk `base_id`)
// with options.element_size (1, 2, 4 or 8): kXorByteGroupZstd, or, for
// float widths (2, 4, 8), kNumDeltaByteGroupZstd when a sample of the
// chunk (its first kDeltaSampleBytes) compresses smaller that way. Returns
// kRaw and the raw bytes when the delta is not smaller. INVALID_ARGUMENT
// when the lengths differ or the width is not allowed.
inline constexpr size_t kDeltaSampleBytes = 64 << 10;
Result<Codec> EncodeDelta(std::string_view raw, std::string_view base,
                          const ChunkId& base_id, std::string* out,
                          const EncodeOptions& options);
// EncodeDelta with the delta codec given (kXorByteGroupZstd or
// kNumDeltaByteGroupZstd, the latter for widths 2, 4 and 8 only).
Result<Codec> EncodeDeltaWith(Codec codec, std::string_view raw,
                              std::string_view base, const ChunkId& base_id,
                              std::string* out, const EncodeOptions& options);

// The base chunk a delta payload (IsDelta) refers to. DATA_LOSS when the
// payload is too short.
Result<ChunkId> DeltaBase(std::string_view payload);

// Decodes a delta payload of `codec` (IsDelta) with its base's decoded
// bytes (`base`, raw_length bytes) into `out`. DATA_LOSS on any mismatch.
Status DecodeDelta(Codec codec, std::string_view payload, std::string_view base,
                   char* out, size_t raw_length);

// Decodes `payload` into `out`, which must have exactly `raw_length` bytes
// of room. A delta (IsDelta) needs DecodeDelta: here it is
// FAILED_PRECONDITION. DATA_LOSS when the payload does not decode to exactly
// `raw_length` bytes.
Status Decode(Codec codec, std::string_view payload, char* out,
              size_t raw_length);

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_CODEC_H_
