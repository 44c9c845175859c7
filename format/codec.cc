#include "format/codec.h"

#include <zstd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace stagger::format {

Result<Codec> Encode(Codec codec, std::string_view raw, std::string* out,
                     const EncodeOptions& options) {
  if (raw.size() > kMaxChunkRawBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk of ", raw.size(), " bytes exceeds ", kMaxChunkRawBytes));
  }
  if (codec == Codec::kZstd) {
    out->resize(ZSTD_compressBound(raw.size()));
    size_t n = ZSTD_compress(out->data(), out->size(), raw.data(), raw.size(),
                             options.zstd_level);
    if (ZSTD_isError(n)) {
      return absl::InternalError(
          absl::StrCat("zstd compress: ", ZSTD_getErrorName(n)));
    }
    if (n < raw.size()) {
      out->resize(n);
      return Codec::kZstd;
    }
  }
  out->assign(raw.data(), raw.size());
  return Codec::kRaw;
}

Status Decode(Codec codec, std::string_view payload, char* out,
              size_t raw_length) {
  switch (codec) {
    case Codec::kRaw:
      if (payload.size() != raw_length) {
        return absl::DataLossError(absl::StrCat("raw payload is ",
                                                payload.size(), " bytes, want ",
                                                raw_length));
      }
      if (raw_length) std::memcpy(out, payload.data(), raw_length);
      return absl::OkStatus();
    case Codec::kZstd: {
      unsigned long long frame =
          ZSTD_getFrameContentSize(payload.data(), payload.size());
      if (frame == ZSTD_CONTENTSIZE_ERROR || frame != raw_length) {
        return absl::DataLossError(
            absl::StrCat("zstd frame does not hold ", raw_length, " bytes"));
      }
      size_t n = ZSTD_decompress(out, raw_length, payload.data(),
                                 payload.size());
      if (ZSTD_isError(n) || n != raw_length) {
        return absl::DataLossError(absl::StrCat(
            "zstd decode failed: ",
            ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output"));
      }
      return absl::OkStatus();
    }
  }
  return absl::DataLossError(
      absl::StrCat("unknown codec ", static_cast<int>(codec)));
}

}  // namespace stagger::format
