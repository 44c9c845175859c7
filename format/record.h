// The chunk record: the unit the client ships and the server stores.
// docs/format.md is normative; the constants here mirror it.
//
//   offset size field
//   0      4    magic            "STGR" (0x52475453 little-endian)
//   4      2    format_version   1
//   6      1    codec            Codec enum
//   7      1    flags            0
//   8      16   chunk_id         xxh3-128 of the decoded bytes, big-endian
//   24     8    raw_length       decoded length
//   32     8    encoded_length   payload length
//   40     4    payload_crc32c   crc32c of the payload
//   44     16   reserved         zero
//   60     4    header_crc32c    crc32c of bytes 0..59
//   64     ...  payload (encoded_length bytes), then zero padding up to
//               a multiple of 4096.
//
// All integers little-endian. Every field is validated on parse; nothing in
// a record is trusted before its checksums and bounds have been checked.
#ifndef STAGGER_FORMAT_RECORD_H_
#define STAGGER_FORMAT_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "format/chunk_id.h"
#include "stagger/status.h"

namespace stagger::format {

inline constexpr uint32_t kRecordMagic = 0x52475453;  // "STGR"
inline constexpr uint16_t kFormatVersion = 1;
inline constexpr size_t kRecordHeaderSize = 64;
inline constexpr size_t kRecordAlignment = 4096;
// Bounds on a single chunk; a record claiming more is rejected.
inline constexpr uint64_t kMaxChunkRawBytes = 64ull << 20;
inline constexpr uint64_t kMaxChunkEncodedBytes = kMaxChunkRawBytes + (1 << 20);

enum class Codec : uint8_t {
  kRaw = 0,
  kZstd = 1,
  // Byte grouping then zstd: payload = element width (u8: 2, 4 or 8), then a
  // zstd frame of the chunk with byte k of every element stored together
  // (all first bytes, then all second bytes, ...). Bytes past the last whole
  // element follow the grouped ones unchanged.
  kByteGroupZstd = 2,
  // Delta against another chunk of the same length (its base): payload =
  // element width (u8: 1, 2, 4 or 8), the base's chunk id (16 bytes), then a
  // zstd frame of (chunk XOR base) byte-grouped as for kByteGroupZstd
  // (width 1: not grouped). Decoding needs the base's decoded bytes.
  kXorByteGroupZstd = 3,
  // Numeric delta against a base, as kXorByteGroupZstd but for floats (w:
  // 2, 4 or 8): each element's bits b are mapped to an unsigned integer in
  // float order (b with the sign bit flipped when it is clear, all bits
  // flipped when it is set), the base's are subtracted modulo 2^(8w), and
  // the difference is zig-zag encoded (so small steps either way are small
  // numbers), byte-grouped and compressed. Bytes past the last whole
  // element are XORed with the base's.
  kNumDeltaByteGroupZstd = 4,
};
inline constexpr int kCodecCount = 5;
// Returns true for a codec value this build can decode.
bool IsKnownCodec(uint8_t codec);
// A delta: decoding needs the base chunk it names.
inline bool IsDelta(Codec c) {
  return c == Codec::kXorByteGroupZstd || c == Codec::kNumDeltaByteGroupZstd;
}
std::string_view CodecName(Codec codec);

struct RecordHeader {
  Codec codec = Codec::kRaw;
  ChunkId chunk_id;
  uint64_t raw_length = 0;
  uint64_t encoded_length = 0;
  uint32_t payload_crc32c = 0;
};

// Writes the 64-byte header for `h` into `out` (kRecordHeaderSize bytes).
void EncodeRecordHeader(const RecordHeader& h, char* out);

// Parses and validates a header: magic, version, codec, lengths within
// bounds, reserved bytes zero, header checksum. DATA_LOSS on any mismatch,
// naming the field.
Result<RecordHeader> DecodeRecordHeader(std::string_view bytes);

// Total on-disk size of a record with this payload length, padding included.
inline uint64_t RecordSize(uint64_t encoded_length) {
  uint64_t n = kRecordHeaderSize + encoded_length;
  return (n + kRecordAlignment - 1) / kRecordAlignment * kRecordAlignment;
}

// Writes header + payload + zero padding into `out`, which must hold
// RecordSize(payload.size()) bytes. `h.encoded_length` and
// `h.payload_crc32c` are filled from `payload`.
void EncodeRecord(RecordHeader h, std::string_view payload, char* out);

// Parses a whole record (header, payload, padding): checks the header, the
// payload checksum and that padding is zero. Returns the header; the payload
// is record.substr(kRecordHeaderSize, encoded_length). DATA_LOSS on any
// corruption, including a truncated record. With `check_payload` false the
// payload checksum is not computed: for a reader that checks the payload
// another way (a raw chunk hashed against its id).
Result<RecordHeader> VerifyRecord(std::string_view record,
                                  bool check_payload = true);

// Checks `payload` against `h` (length and crc32c). DATA_LOSS on mismatch.
Status VerifyPayload(const RecordHeader& h, std::string_view payload);

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_RECORD_H_
