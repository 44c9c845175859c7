#include "format/codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "format/internal/byte_group.h"

namespace stagger::format {
namespace {

inline uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// A buffer of at least `n` bytes for this thread, reused from call to call
// (no zero-fill of a fresh chunk-sized allocation each time).
char* Scratch(size_t n) {
  static thread_local std::string scratch;
  if (scratch.size() < n) scratch.resize(n);
  return scratch.data();
}

// Compresses `in` into `out` after `prefix` bytes already there; returns
// false when zstd fails.
Status ZstdAppend(std::string_view in, int level, std::string* out,
                  size_t prefix) {
  // One compression context per thread: ZSTD_compress would set up and
  // tear down its tables for every chunk.
  struct Ctx {
    ZSTD_CCtx* ctx = ZSTD_createCCtx();
    ~Ctx() { ZSTD_freeCCtx(ctx); }
  };
  static thread_local Ctx cctx;
  if (cctx.ctx == nullptr) return absl::ResourceExhaustedError("zstd context");
  out->resize(prefix + ZSTD_compressBound(in.size()));
  size_t n =
      ZSTD_compressCCtx(cctx.ctx, out->data() + prefix, out->size() - prefix,
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
    char* grouped = Scratch(raw.size());
    internal::GroupBytes(raw.data(), nullptr, n, w, grouped);
    std::memcpy(grouped + n * w, raw.data() + n * w, raw.size() - n * w);
    out->assign(1, static_cast<char>(w));
    STAGGER_RETURN_IF_ERROR(ZstdAppend(std::string_view(grouped, raw.size()),
                                       options.zstd_level, out, 1));
    if (out->size() < raw.size()) return Codec::kByteGroupZstd;
  }
  out->assign(raw.data(), raw.size());
  return Codec::kRaw;
}

namespace {

// Float bits -> an unsigned integer in float order: positive values get
// the sign bit set, negative ones all bits flipped. A bijection.
template <typename U>
inline U Ordered(U bits) {
  constexpr U kSign = U(1) << (sizeof(U) * 8 - 1);
  // All ones when the sign is set: ~bits; else bits ^ kSign. No branch.
  const U mask = static_cast<U>(-static_cast<U>(bits >> (sizeof(U) * 8 - 1)));
  return static_cast<U>(bits ^ (mask | kSign));
}
template <typename U>
inline U Unordered(U v) {
  constexpr U kSign = U(1) << (sizeof(U) * 8 - 1);
  return (v & kSign) ? static_cast<U>(v & ~kSign) : static_cast<U>(~v);
}
template <typename U>
inline U ZigZag(U d) {
  using S = std::make_signed_t<U>;
  return static_cast<U>(
      (d << 1) ^ static_cast<U>(static_cast<S>(d) >> (sizeof(U) * 8 - 1)));
}
template <typename U>
inline U UnZigZag(U z) {
  return static_cast<U>((z >> 1) ^ static_cast<U>(-(z & 1)));
}

// out[b * n + i] = byte b of ZigZag(Ordered(x[i]) - Ordered(y[i])): the
// differences in a pass the compiler vectorizes, then grouped.
template <typename U>
void NumGroup(const char* x, const char* y, size_t n, char* out) {
  static thread_local std::string diffs;
  if (diffs.size() < n * sizeof(U)) diffs.resize(n * sizeof(U));
  char* z = diffs.data();
  for (size_t i = 0; i < n; ++i) {
    U a, b;
    std::memcpy(&a, x + i * sizeof(U), sizeof(U));
    std::memcpy(&b, y + i * sizeof(U), sizeof(U));
    const U d = ZigZag<U>(static_cast<U>(Ordered(a) - Ordered(b)));
    std::memcpy(z + i * sizeof(U), &d, sizeof(U));
  }
  internal::GroupBytes(z, nullptr, n, sizeof(U), out);
}

// The inverse: out[i] = Unordered(Ordered(base[i]) + UnZigZag(z[i])).
template <typename U>
void NumUngroup(const char* grouped, const char* base, size_t n, char* out) {
  // The differences ungrouped first (a fast transpose) into scratch of
  // their own: `out` may be the base.
  static thread_local std::string diffs;
  if (diffs.size() < n * sizeof(U)) diffs.resize(n * sizeof(U));
  char* z = diffs.data();
  internal::UngroupBytes(grouped, nullptr, n, sizeof(U), z);
  for (size_t i = 0; i < n; ++i) {
    U d, b;
    std::memcpy(&d, z + i * sizeof(U), sizeof(U));
    std::memcpy(&b, base + i * sizeof(U), sizeof(U));
    U v = Unordered<U>(static_cast<U>(Ordered(b) + UnZigZag(d)));
    std::memcpy(out + i * sizeof(U), &v, sizeof(U));
  }
}

// NumGroup's differences for the lanes of one 64-bit word at once (SWAR):
// `lanes` of 16 or 32 bits. `low` has the lowest bit of each lane set.
template <int kBits>
inline uint64_t NumDiffWord(uint64_t a, uint64_t b) {
  constexpr uint64_t kLow =
      kBits == 16 ? 0x0001000100010001ull : 0x0000000100000001ull;
  constexpr uint64_t kHigh = kLow << (kBits - 1);
  constexpr uint64_t kLane = kBits == 16 ? 0xffffull : 0xffffffffull;
  auto ordered = [](uint64_t v) {
    const uint64_t mask = ((v >> (kBits - 1)) & kLow) * kLane;
    return v ^ (mask | kHigh);
  };
  const uint64_t x = ordered(a), y = ordered(b);
  // Lane-wise x - y mod 2^kBits, no borrow across lanes.
  const uint64_t d = ((x | kHigh) - (y & ~kHigh)) ^ ((x ^ ~y) & kHigh);
  // Lane-wise zig-zag: (d << 1) ^ (d's sign spread over the lane).
  return ((d << 1) & ~kLow) ^ (((d >> (kBits - 1)) & kLow) * kLane);
}

// NumGroup<U> for 16- and 32-bit elements, a word at a time.
template <int kBits>
void NumGroupSwar(const char* x, const char* y, size_t n, char* out) {
  constexpr size_t kPer = 64 / kBits;  // elements per word
  constexpr size_t kSize = kBits / 8;
  static thread_local std::string diffs;
  if (diffs.size() < n * kSize) diffs.resize(n * kSize);
  char* z = diffs.data();
  size_t i = 0;
  for (; i + kPer <= n; i += kPer) {
    const uint64_t d =
        NumDiffWord<kBits>(Load64(x + i * kSize), Load64(y + i * kSize));
    std::memcpy(z + i * kSize, &d, 8);
  }
  using U = std::conditional_t<kBits == 16, uint16_t, uint32_t>;
  for (; i < n; ++i) {
    U a, b;
    std::memcpy(&a, x + i * kSize, kSize);
    std::memcpy(&b, y + i * kSize, kSize);
    const U d = ZigZag<U>(static_cast<U>(Ordered(a) - Ordered(b)));
    std::memcpy(z + i * kSize, &d, kSize);
  }
  internal::GroupBytes(z, nullptr, n, kSize, out);
}

void NumGroupAny(const char* x, const char* y, size_t n, int w, char* out) {
  switch (w) {
    case 2:
      return NumGroupSwar<16>(x, y, n, out);
    case 4:
      return NumGroupSwar<32>(x, y, n, out);
    default:
      return NumGroup<uint64_t>(x, y, n, out);
  }
}

void NumUngroupAny(const char* grouped, const char* base, size_t n, int w,
                   char* out) {
  switch (w) {
    case 2:
      return NumUngroup<uint16_t>(grouped, base, n, out);
    case 4:
      return NumUngroup<uint32_t>(grouped, base, n, out);
    default:
      return NumUngroup<uint64_t>(grouped, base, n, out);
  }
}

Status CheckDelta(Codec codec, int w, std::string_view raw,
                  std::string_view base) {
  if (codec != Codec::kXorByteGroupZstd &&
      codec != Codec::kNumDeltaByteGroupZstd) {
    return absl::InvalidArgumentError(absl::StrCat(
        "codec ", std::string(CodecName(codec)), " is not a delta codec"));
  }
  const bool numeric = codec == Codec::kNumDeltaByteGroupZstd;
  if (!(w == 2 || w == 4 || w == 8 || (w == 1 && !numeric))) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(CodecName(codec)), " element size must be ",
                     numeric ? "2, 4 or 8" : "1, 2, 4 or 8", ", got ", w));
  }
  if (raw.size() != base.size() || raw.size() > kMaxChunkRawBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta of ", raw.size(), " bytes against a base of ", base.size()));
  }
  return absl::OkStatus();
}

// The delta of `raw` against `base` with `codec`, grouped, into `grouped`
// (raw.size() bytes).
void GroupDelta(Codec codec, int w, std::string_view raw, std::string_view base,
                char* grouped) {
  const size_t n = raw.size() / w;
  if (codec == Codec::kNumDeltaByteGroupZstd) {
    NumGroupAny(raw.data(), base.data(), n, w, grouped);
  } else {
    internal::GroupBytes(raw.data(), base.data(), n, w, grouped);
  }
  for (size_t i = n * w; i < raw.size(); ++i) grouped[i] = raw[i] ^ base[i];
}

}  // namespace

Result<Codec> EncodeDeltaWith(Codec codec, std::string_view raw,
                              std::string_view base, const ChunkId& base_id,
                              std::string* out, const EncodeOptions& options) {
  const int w = options.element_size;
  STAGGER_RETURN_IF_ERROR(CheckDelta(codec, w, raw, base));
  // Delta and grouping in one pass: no intermediate copy of the chunk.
  char* grouped = Scratch(raw.size());
  GroupDelta(codec, w, raw, base, grouped);
  out->assign(1, static_cast<char>(w));
  out->append(base_id.ToBytes());
  STAGGER_RETURN_IF_ERROR(ZstdAppend(std::string_view(grouped, raw.size()),
                                     options.zstd_level, out, 17));
  if (out->size() < raw.size()) return codec;
  out->assign(raw.data(), raw.size());
  return Codec::kRaw;
}

Result<Codec> EncodeDelta(std::string_view raw, std::string_view base,
                          const ChunkId& base_id, std::string* out,
                          const EncodeOptions& options) {
  const int w = options.element_size;
  STAGGER_RETURN_IF_ERROR(CheckDelta(Codec::kXorByteGroupZstd, w, raw, base));
  Codec codec = Codec::kXorByteGroupZstd;
  if (w != 1 && options.numeric_delta) {
    // Which delta compresses better, judged on a sample: the first
    // kDeltaSampleBytes (whole elements), each way.
    const size_t len = std::min(raw.size(), kDeltaSampleBytes) / w * w;
    if (len > 0) {
      std::string x, y;
      STAGGER_RETURN_IF_ERROR(
          EncodeDeltaWith(Codec::kXorByteGroupZstd, raw.substr(0, len),
                          base.substr(0, len), base_id, &x, options)
              .status());
      STAGGER_RETURN_IF_ERROR(
          EncodeDeltaWith(Codec::kNumDeltaByteGroupZstd, raw.substr(0, len),
                          base.substr(0, len), base_id, &y, options)
              .status());
      if (y.size() < x.size()) codec = Codec::kNumDeltaByteGroupZstd;
      if (len == raw.size()) {
        // The sample was the chunk: keep what it gave.
        std::string& best = codec == Codec::kNumDeltaByteGroupZstd ? y : x;
        if (best.size() >= raw.size()) {
          out->assign(raw.data(), raw.size());
          return Codec::kRaw;
        }
        out->swap(best);
        return codec;
      }
    }
  }
  return EncodeDeltaWith(codec, raw, base, base_id, out, options);
}

Result<ChunkId> DeltaBase(std::string_view payload) {
  if (payload.size() < 17) {
    return absl::DataLossError("delta payload shorter than its header");
  }
  auto id = ChunkId::FromBytes(payload.substr(1, 16));
  if (!id.ok()) return absl::DataLossError(id.status().message());
  return *id;
}

Status DecodeDelta(Codec codec, std::string_view payload, std::string_view base,
                   char* out, size_t raw_length) {
  if (!IsDelta(codec)) {
    return absl::DataLossError(absl::StrCat(
        "codec ", std::string(CodecName(codec)), " is not a delta codec"));
  }
  if (payload.size() < 17) {
    return absl::DataLossError("delta payload shorter than its header");
  }
  const bool numeric = codec == Codec::kNumDeltaByteGroupZstd;
  int w = static_cast<uint8_t>(payload[0]);
  if (!(w == 2 || w == 4 || w == 8 || (w == 1 && !numeric))) {
    return absl::DataLossError(absl::StrCat("bad delta element size ", w));
  }
  if (base.size() != raw_length) {
    return absl::DataLossError(absl::StrCat("delta base has ", base.size(),
                                            " bytes, chunk has ", raw_length));
  }
  char* grouped = Scratch(raw_length);
  STAGGER_RETURN_IF_ERROR(ZstdDecode(payload.substr(17), grouped, raw_length));
  const size_t n = raw_length / w;
  if (numeric) {
    NumUngroupAny(grouped, base.data(), n, w, out);
    for (size_t i = n * w; i < raw_length; ++i) out[i] = grouped[i] ^ base[i];
    return absl::OkStatus();
  }
  // Ungrouped and XORed with the base in one pass (out may be the base).
  internal::UngroupBytes(grouped, base.data(), n, w, out);
  for (size_t i = n * w; i < raw_length; ++i) out[i] = grouped[i] ^ base[i];
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
      // The thread's scratch: a new 4 MiB buffer per chunk would be zeroed
      // and faulted in at every load.
      char* grouped = Scratch(raw_length);
      STAGGER_RETURN_IF_ERROR(
          ZstdDecode(payload.substr(1), grouped, raw_length));
      size_t n = raw_length / w;
      internal::UngroupBytes(grouped, nullptr, n, w, out);
      std::memcpy(out + n * w, grouped + n * w, raw_length - n * w);
      return absl::OkStatus();
    }
    case Codec::kXorByteGroupZstd:
    case Codec::kNumDeltaByteGroupZstd:
      return absl::FailedPreconditionError(
          "a delta chunk needs its base chunk to decode");
  }
  return absl::DataLossError(
      absl::StrCat("unknown codec ", static_cast<int>(codec)));
}

}  // namespace stagger::format
