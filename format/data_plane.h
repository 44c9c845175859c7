// Data-plane messages between client and server, carried by transport/ as
// {op, header, payload}. docs/format.md §"Data plane" is normative.
//
//   PutChunk       header: job_len u8, job, record header (64 bytes),
//                          optionally flags u8 (kPutInMemory)
//                  payload: the encoded chunk bytes
//   PutChunkReply  header: reply status (below)
//   GetChunk       header: job_len u8, job, chunk id (16 bytes)
//   GetChunkReply  header: reply status, then on OK the record header
//                  payload: the encoded chunk bytes
//   GetRange       header: job_len u8, job, chunk id (16 bytes), count u32,
//                          count x (offset u64, length u64): parts of the
//                          decoded chunk
//   GetRangeReply  header: reply status, then on OK crc32c u32 of the payload
//                  payload: the parts' decoded bytes, one after another
//   reply status:  code u32 (absl::StatusCode), msg_len u16, msg
//
// Decoders validate every length and name; a malformed message is
// INVALID_ARGUMENT, never a crash.
#ifndef STAGGER_FORMAT_DATA_PLANE_H_
#define STAGGER_FORMAT_DATA_PLANE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/chunk_id.h"
#include "format/record.h"
#include "stagger/status.h"

namespace stagger::format {

enum class DataOp : uint16_t {
  kPutChunk = 1,
  kPutChunkReply = 2,
  kGetChunk = 3,
  kGetChunkReply = 4,
  // Header: the data-session key from Hello (servers with --auth-tokens);
  // binds the connection to the key's grant. Reply: a status only.
  kAuth = 5,
  kAuthReply = 6,
  // Part of a chunk's decoded bytes, decoded and checked against the chunk
  // id by the server (HelloReply::serves_ranges): a reshard needing a few
  // rows of a chunk moves only those.
  kGetRange = 7,
  kGetRangeReply = 8,
};
inline constexpr size_t kMaxDataKeyBytes = 128;

// PutChunk flag: the client saves with durability "memory": the server may
// acknowledge once the chunk is held in its memory tier, and writes it to
// disk behind (HelloReply::memory_bytes). Sent only to servers with one:
// older servers refuse the flags byte.
inline constexpr uint8_t kPutInMemory = 1;

// PutChunk flag: the whole chunk replaces `previous` (the same tensor's
// chunk in the sender's last save) and the server may store that one as a
// delta of it; 16 bytes of id and a byte of element width follow the flags.
// Only to servers whose Hello says takes_previous.
inline constexpr uint8_t kPutHasPrevious = 2;

struct PutChunkRequest {
  std::string job;
  RecordHeader record;
  bool in_memory = false;  // kPutInMemory
  // kPutHasPrevious: the version this whole chunk replaces, and the width
  // of its elements (1, 2, 4, 8) for the server's encoding.
  std::optional<ChunkId> previous;
  uint8_t element_size = 1;
};
std::string EncodePutChunk(const PutChunkRequest& r);
Result<PutChunkRequest> DecodePutChunk(std::string_view header);

struct GetChunkRequest {
  std::string job;
  ChunkId id;
  // The stored record's bytes (header and payload) as the reader's
  // manifest has them; 0: not known. A server that reads the chunk from
  // its cold tier reads that much at once instead of asking the store for
  // the object's size first. A hint only: a record of another size (a
  // chunk re-encoded since) is read whole all the same.
  uint64_t size_hint = 0;
};
std::string EncodeGetChunk(const GetChunkRequest& r);
Result<GetChunkRequest> DecodeGetChunk(std::string_view header);

// A part of a chunk's decoded bytes: [offset, offset + length).
struct ChunkPart {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const ChunkPart& o) const {
    return offset == o.offset && length == o.length;
  }
};
// What fits in a transport header (8 KiB) with the longest job name.
inline constexpr size_t kMaxRangeParts = 480;

struct GetRangeRequest {
  std::string job;
  ChunkId id;
  std::vector<ChunkPart> parts;
};
std::string EncodeGetRange(const GetRangeRequest& r);
// INVALID_ARGUMENT for a malformed header, no part or more than
// kMaxRangeParts, an empty part, or parts ending past kMaxChunkRawBytes or
// adding up to more.
Result<GetRangeRequest> DecodeGetRange(std::string_view header);

// A GetRangeReply header: the status, then on OK the CRC-32C of the bytes.
std::string EncodeRangeReply(const Status& status, uint32_t crc32c = 0);
struct RangeReply {
  Status status;
  uint32_t crc32c = 0;  // on OK
};
// The outer Result fails only on a malformed reply.
Result<RangeReply> DecodeRangeReply(std::string_view header);

// A reply header: the status, then (optionally, on OK) a record header.
std::string EncodeReply(const Status& status,
                        const RecordHeader* record = nullptr);
// Returns the carried status (as a Status value) and, when present, the
// record header. The outer Result fails only on a malformed reply.
struct Reply {
  Status status;
  bool has_record = false;
  RecordHeader record;
};
Result<Reply> DecodeReply(std::string_view header);

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_DATA_PLANE_H_
