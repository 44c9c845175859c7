// Data-plane messages between client and server, carried by transport/ as
// {op, header, payload}. docs/format.md §"Data plane" is normative.
//
//   PutChunk       header: job_len u8, job, record header (64 bytes)
//                  payload: the encoded chunk bytes
//   PutChunkReply  header: reply status (below)
//   GetChunk       header: job_len u8, job, chunk id (16 bytes)
//   GetChunkReply  header: reply status, then on OK the record header
//                  payload: the encoded chunk bytes
//   reply status:  code u32 (absl::StatusCode), msg_len u16, msg
//
// Decoders validate every length and name; a malformed message is
// INVALID_ARGUMENT, never a crash.
#ifndef STAGGER_FORMAT_DATA_PLANE_H_
#define STAGGER_FORMAT_DATA_PLANE_H_

#include <cstdint>
#include <string>
#include <string_view>

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
};
inline constexpr size_t kMaxDataKeyBytes = 128;

struct PutChunkRequest {
  std::string job;
  RecordHeader record;
};
std::string EncodePutChunk(const PutChunkRequest& r);
Result<PutChunkRequest> DecodePutChunk(std::string_view header);

struct GetChunkRequest {
  std::string job;
  ChunkId id;
};
std::string EncodeGetChunk(const GetChunkRequest& r);
Result<GetChunkRequest> DecodeGetChunk(std::string_view header);

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
