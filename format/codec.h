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
  // Element width for kByteGroupZstd: 2 (bf16, f16), 4 (f32) or 8 (f64).
  int element_size = 4;
};

// Encodes `raw` with `codec` into `out` (replaced). When the encoded form
// is not smaller, returns kRaw and the raw bytes instead: the returned codec
// is the one actually used. INVALID_ARGUMENT for an element size other than
// 2, 4 or 8 with kByteGroupZstd.
Result<Codec> Encode(Codec codec, std::string_view raw, std::string* out,
                     const EncodeOptions& options = {});

// Decodes `payload` into `out`, which must have exactly `raw_length` bytes
// of room. DATA_LOSS when the payload does not decode to exactly
// `raw_length` bytes.
Status Decode(Codec codec, std::string_view payload, char* out,
              size_t raw_length);

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_CODEC_H_
