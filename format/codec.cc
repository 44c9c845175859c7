#include "format/codec.h"

#include <zstd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace stagger::format {
namespace {

// out[b * n + i] = in[i * w + b] for the n whole elements of width w.
void Group(const char* in, size_t n, int w, char* out) {
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < w; ++b) out[b * n + i] = in[i * w + b];
  }
}

void Ungroup(const char* in, size_t n, int w, char* out) {
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < w; ++b) out[i * w + b] = in[b * n + i];
  }
}

// Specialisations the compiler can unroll for the common widths.
template <int W>
void GroupW(const char* in, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < W; ++b) out[b * n + i] = in[i * W + b];
  }
}
template <int W>
void UngroupW(const char* in, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < W; ++b) out[i * W + b] = in[b * n + i];
  }
}

void GroupAny(const char* in, size_t n, int w, char* out) {
  switch (w) {
    case 2:
      return GroupW<2>(in, n, out);
    case 4:
      return GroupW<4>(in, n, out);
    case 8:
      return GroupW<8>(in, n, out);
    default:
      return Group(in, n, w, out);
  }
}

void UngroupAny(const char* in, size_t n, int w, char* out) {
  switch (w) {
    case 2:
      return UngroupW<2>(in, n, out);
    case 4:
      return UngroupW<4>(in, n, out);
    case 8:
      return UngroupW<8>(in, n, out);
    default:
      return Ungroup(in, n, w, out);
  }
}

// Compresses `in` into `out` after `prefix` bytes already there; returns
// false when zstd fails.
Status ZstdAppend(std::string_view in, int level, std::string* out,
                  size_t prefix) {
  out->resize(prefix + ZSTD_compressBound(in.size()));
  size_t n = ZSTD_compress(out->data() + prefix, out->size() - prefix,
                           in.data(), in.size(), level);
  if (ZSTD_isError(n)) {
    return absl::InternalError(
        absl::StrCat("zstd compress: ", ZSTD_getErrorName(n)));
  }
  out->resize(prefix + n);
  return absl::OkStatus();
}

Status ZstdDecode(std::string_view payload, char* out, size_t raw_length) {
  unsigned long long frame =
      ZSTD_getFrameContentSize(payload.data(), payload.size());
  if (frame == ZSTD_CONTENTSIZE_ERROR || frame != raw_length) {
    return absl::DataLossError(
        absl::StrCat("zstd frame does not hold ", raw_length, " bytes"));
  }
  size_t n = ZSTD_decompress(out, raw_length, payload.data(), payload.size());
  if (ZSTD_isError(n) || n != raw_length) {
    return absl::DataLossError(
        absl::StrCat("zstd decode failed: ",
                     ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output"));
  }
  return absl::OkStatus();
}

}  // namespace

Result<Codec> Encode(Codec codec, std::string_view raw, std::string* out,
                     const EncodeOptions& options) {
  if (raw.size() > kMaxChunkRawBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk of ", raw.size(), " bytes exceeds ", kMaxChunkRawBytes));
  }
  if (codec == Codec::kZstd) {
    STAGGER_RETURN_IF_ERROR(ZstdAppend(raw, options.zstd_level, out, 0));
    if (out->size() < raw.size()) return Codec::kZstd;
  } else if (codec == Codec::kByteGroupZstd) {
    const int w = options.element_size;
    if (w != 2 && w != 4 && w != 8) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte grouping needs an element size of 2, 4 or 8, "
                       "got ",
                       w));
    }
    size_t n = raw.size() / w;
    std::string grouped(raw.size(), '\0');
    GroupAny(raw.data(), n, w, grouped.data());
    std::memcpy(grouped.data() + n * w, raw.data() + n * w, raw.size() - n * w);
    out->assign(1, static_cast<char>(w));
    STAGGER_RETURN_IF_ERROR(ZstdAppend(grouped, options.zstd_level, out, 1));
    if (out->size() < raw.size()) return Codec::kByteGroupZstd;
  }
  out->assign(raw.data(), raw.size());
  return Codec::kRaw;
}

Result<Codec> EncodeDelta(std::string_view raw, std::string_view base,
                          const ChunkId& base_id, std::string* out,
                          const EncodeOptions& options) {
  const int w = options.element_size;
  if (w != 1 && w != 2 && w != 4 && w != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("delta element size must be 1, 2, 4 or 8, got ", w));
  }
  if (raw.size() != base.size() || raw.size() > kMaxChunkRawBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta of ", raw.size(), " bytes against a base of ", base.size()));
  }
  // XOR and group in one pass: no intermediate copy of the chunk.
  const size_t n = raw.size() / w;
  std::string grouped(raw.size(), '\0');
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < w; ++b) {
      grouped[b * n + i] = raw[i * w + b] ^ base[i * w + b];
    }
  }
  for (size_t i = n * w; i < raw.size(); ++i) grouped[i] = raw[i] ^ base[i];
  out->assign(1, static_cast<char>(w));
  out->append(base_id.ToBytes());
  STAGGER_RETURN_IF_ERROR(ZstdAppend(grouped, options.zstd_level, out, 17));
  if (out->size() < raw.size()) return Codec::kXorByteGroupZstd;
  out->assign(raw.data(), raw.size());
  return Codec::kRaw;
}

Result<ChunkId> DeltaBase(std::string_view payload) {
  if (payload.size() < 17) {
    return absl::DataLossError("delta payload shorter than its header");
  }
  auto id = ChunkId::FromBytes(payload.substr(1, 16));
  if (!id.ok()) return absl::DataLossError(id.status().message());
  return *id;
}

Status DecodeDelta(std::string_view payload, std::string_view base, char* out,
                   size_t raw_length) {
  if (payload.size() < 17) {
    return absl::DataLossError("delta payload shorter than its header");
  }
  int w = static_cast<uint8_t>(payload[0]);
  if (w != 1 && w != 2 && w != 4 && w != 8) {
    return absl::DataLossError(absl::StrCat("bad delta element size ", w));
  }
  if (base.size() != raw_length) {
    return absl::DataLossError(absl::StrCat("delta base has ", base.size(),
                                            " bytes, chunk has ", raw_length));
  }
  std::string grouped(raw_length, '\0');
  STAGGER_RETURN_IF_ERROR(
      ZstdDecode(payload.substr(17), grouped.data(), raw_length));
  size_t n = raw_length / w;
  if (w == 1) {
    std::memcpy(out, grouped.data(), raw_length);
  } else {
    UngroupAny(grouped.data(), n, w, out);
    std::memcpy(out + n * w, grouped.data() + n * w, raw_length - n * w);
  }
  for (size_t i = 0; i < raw_length; ++i) out[i] ^= base[i];
  return absl::OkStatus();
}

Status Decode(Codec codec, std::string_view payload, char* out,
              size_t raw_length) {
  switch (codec) {
    case Codec::kRaw:
      if (payload.size() != raw_length) {
        return absl::DataLossError(absl::StrCat(
            "raw payload is ", payload.size(), " bytes, want ", raw_length));
      }
      if (raw_length) std::memcpy(out, payload.data(), raw_length);
      return absl::OkStatus();
    case Codec::kZstd:
      return ZstdDecode(payload, out, raw_length);
    case Codec::kByteGroupZstd: {
      if (payload.empty()) return absl::DataLossError("empty payload");
      int w = static_cast<uint8_t>(payload[0]);
      if (w != 2 && w != 4 && w != 8) {
        return absl::DataLossError(
            absl::StrCat("bad byte-group element size ", w));
      }
      std::string grouped(raw_length, '\0');
      STAGGER_RETURN_IF_ERROR(
          ZstdDecode(payload.substr(1), grouped.data(), raw_length));
      size_t n = raw_length / w;
      UngroupAny(grouped.data(), n, w, out);
      std::memcpy(out + n * w, grouped.data() + n * w, raw_length - n * w);
      return absl::OkStatus();
    }
    case Codec::kXorByteGroupZstd:
      return absl::FailedPreconditionError(
          "a delta chunk needs its base chunk to decode");
  }
  return absl::DataLossError(
      absl::StrCat("unknown codec ", static_cast<int>(codec)));
}

}  // namespace stagger::format
