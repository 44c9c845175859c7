#include "format/record.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "format/crc32c.h"
#include "format/internal/endian.h"

namespace stagger::format {
namespace {

using format_internal::GetLE;
using format_internal::PutLE;

// Field offsets; docs/format.md §"Chunk record".
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffCodec = 6;
constexpr size_t kOffFlags = 7;
constexpr size_t kOffChunkId = 8;
constexpr size_t kOffRawLength = 24;
constexpr size_t kOffEncodedLength = 32;
constexpr size_t kOffPayloadCrc = 40;
constexpr size_t kOffReserved = 44;
constexpr size_t kReservedLen = 16;
constexpr size_t kOffHeaderCrc = 60;

Status Corrupt(std::string_view what) {
  return absl::DataLossError(
      absl::StrCat("corrupt chunk record: ", AsAbsl(what)));
}

}  // namespace

bool IsKnownCodec(uint8_t codec) { return codec < kCodecCount; }

std::string_view CodecName(Codec codec) {
  switch (codec) {
    case Codec::kRaw:
      return "raw";
    case Codec::kZstd:
      return "zstd";
    case Codec::kByteGroupZstd:
      return "bytegroup+zstd";
    case Codec::kXorByteGroupZstd:
      return "xor+bytegroup+zstd";
    case Codec::kNumDeltaByteGroupZstd:
      return "num+bytegroup+zstd";
  }
  return "unknown";
}

void EncodeRecordHeader(const RecordHeader& h, char* out) {
  std::memset(out, 0, kRecordHeaderSize);
  PutLE<uint32_t>(out + kOffMagic, kRecordMagic);
  PutLE<uint16_t>(out + kOffVersion, kFormatVersion);
  out[kOffCodec] = static_cast<char>(h.codec);
  out[kOffFlags] = 0;
  std::string id = h.chunk_id.ToBytes();
  std::memcpy(out + kOffChunkId, id.data(), 16);
  PutLE<uint64_t>(out + kOffRawLength, h.raw_length);
  PutLE<uint64_t>(out + kOffEncodedLength, h.encoded_length);
  PutLE<uint32_t>(out + kOffPayloadCrc, h.payload_crc32c);
  PutLE<uint32_t>(out + kOffHeaderCrc, Crc32c(out, kOffHeaderCrc));
}

Result<RecordHeader> DecodeRecordHeader(std::string_view b) {
  if (b.size() < kRecordHeaderSize) {
    return Corrupt(absl::StrCat("header truncated (", b.size(), " of ",
                                kRecordHeaderSize, " bytes)"));
  }
  const char* p = b.data();
  if (GetLE<uint32_t>(p + kOffMagic) != kRecordMagic)
    return Corrupt("bad magic");
  if (Crc32c(p, kOffHeaderCrc) != GetLE<uint32_t>(p + kOffHeaderCrc)) {
    return Corrupt("header checksum mismatch");
  }
  uint16_t version = GetLE<uint16_t>(p + kOffVersion);
  if (version != kFormatVersion) {
    return Corrupt(absl::StrCat("unsupported format version ", version));
  }
  uint8_t codec = static_cast<uint8_t>(p[kOffCodec]);
  if (!IsKnownCodec(codec))
    return Corrupt(absl::StrCat("unknown codec ", codec));
  if (p[kOffFlags] != 0) return Corrupt("nonzero flags");
  for (size_t i = 0; i < kReservedLen; ++i) {
    if (p[kOffReserved + i] != 0) return Corrupt("nonzero reserved bytes");
  }
  RecordHeader h;
  h.codec = static_cast<Codec>(codec);
  h.chunk_id = *ChunkId::FromBytes(std::string_view(p + kOffChunkId, 16));
  h.raw_length = GetLE<uint64_t>(p + kOffRawLength);
  h.encoded_length = GetLE<uint64_t>(p + kOffEncodedLength);
  h.payload_crc32c = GetLE<uint32_t>(p + kOffPayloadCrc);
  if (h.raw_length > kMaxChunkRawBytes) {
    return Corrupt(
        absl::StrCat("raw length ", h.raw_length, " over the limit"));
  }
  if (h.encoded_length > kMaxChunkEncodedBytes) {
    return Corrupt(
        absl::StrCat("encoded length ", h.encoded_length, " over the limit"));
  }
  if (h.codec == Codec::kRaw && h.encoded_length != h.raw_length) {
    return Corrupt("raw codec with encoded length != raw length");
  }
  return h;
}

void EncodeRecord(RecordHeader h, std::string_view payload, char* out) {
  h.encoded_length = payload.size();
  h.payload_crc32c = Crc32c(payload.data(), payload.size());
  EncodeRecordHeader(h, out);
  if (!payload.empty()) {
    std::memcpy(out + kRecordHeaderSize, payload.data(), payload.size());
  }
  uint64_t used = kRecordHeaderSize + payload.size();
  std::memset(out + used, 0, RecordSize(payload.size()) - used);
}

Status VerifyPayload(const RecordHeader& h, std::string_view payload) {
  if (payload.size() != h.encoded_length) {
    return Corrupt(absl::StrCat("payload is ", payload.size(),
                                " bytes, header says ", h.encoded_length));
  }
  if (Crc32c(payload.data(), payload.size()) != h.payload_crc32c) {
    return Corrupt(absl::StrCat("payload checksum mismatch for chunk ",
                                h.chunk_id.ToHex()));
  }
  return absl::OkStatus();
}

Result<RecordHeader> VerifyRecord(std::string_view record, bool check_payload) {
  STAGGER_ASSIGN_OR_RETURN(RecordHeader h, DecodeRecordHeader(record));
  uint64_t total = RecordSize(h.encoded_length);
  if (record.size() < total) {
    return Corrupt(absl::StrCat("record truncated (", record.size(), " of ",
                                total, " bytes) for chunk ",
                                h.chunk_id.ToHex()));
  }
  if (check_payload) {
    STAGGER_RETURN_IF_ERROR(
        VerifyPayload(h, record.substr(kRecordHeaderSize, h.encoded_length)));
  }
  for (uint64_t i = kRecordHeaderSize + h.encoded_length; i < total; ++i) {
    if (record[i] != 0) {
      return Corrupt(
          absl::StrCat("nonzero padding in chunk ", h.chunk_id.ToHex()));
    }
  }
  return h;
}

}  // namespace stagger::format
