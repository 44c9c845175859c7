#include "format/data_plane.h"

#include "absl/strings/str_cat.h"
#include "format/internal/endian.h"
#include "format/names.h"

namespace stagger::format {
namespace {

using format_internal::GetLE;
using format_internal::PutLE;

constexpr size_t kMaxReplyMessage = 1024;

Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed data-plane message: ", AsAbsl(what)));
}

// Reads the job name prefix; advances `in`.
Result<std::string> TakeJob(std::string_view* in) {
  if (in->empty()) return Malformed("missing job length");
  size_t n = static_cast<uint8_t>((*in)[0]);
  if (in->size() < 1 + n) return Malformed("job name truncated");
  std::string job(in->substr(1, n));
  STAGGER_RETURN_IF_ERROR(ValidateName("job", job));
  in->remove_prefix(1 + n);
  return job;
}

void PutJob(std::string* out, const std::string& job) {
  out->push_back(static_cast<char>(job.size() & 0xff));
  out->append(job.substr(0, 255));
}

}  // namespace

std::string EncodePutChunk(const PutChunkRequest& r) {
  std::string out;
  PutJob(&out, r.job);
  char h[kRecordHeaderSize];
  EncodeRecordHeader(r.record, h);
  out.append(h, sizeof h);
  return out;
}

Result<PutChunkRequest> DecodePutChunk(std::string_view in) {
  PutChunkRequest r;
  STAGGER_ASSIGN_OR_RETURN(r.job, TakeJob(&in));
  if (in.size() != kRecordHeaderSize) {
    return Malformed("PutChunk needs exactly one record header");
  }
  auto h = DecodeRecordHeader(in);
  if (!h.ok()) return Malformed(std::string(h.status().message()));
  r.record = *h;
  return r;
}

std::string EncodeGetChunk(const GetChunkRequest& r) {
  std::string out;
  PutJob(&out, r.job);
  out += r.id.ToBytes();
  return out;
}

Result<GetChunkRequest> DecodeGetChunk(std::string_view in) {
  GetChunkRequest r;
  STAGGER_ASSIGN_OR_RETURN(r.job, TakeJob(&in));
  if (in.size() != 16) return Malformed("GetChunk needs a 16-byte chunk id");
  STAGGER_ASSIGN_OR_RETURN(r.id, ChunkId::FromBytes(in));
  return r;
}

std::string EncodeReply(const Status& status, const RecordHeader* record) {
  std::string msg(status.message().substr(0, kMaxReplyMessage));
  std::string out(6, '\0');
  PutLE<uint32_t>(out.data(), static_cast<uint32_t>(status.code()));
  PutLE<uint16_t>(out.data() + 4, static_cast<uint16_t>(msg.size()));
  out += msg;
  if (status.ok() && record != nullptr) {
    char h[kRecordHeaderSize];
    EncodeRecordHeader(*record, h);
    out.append(h, sizeof h);
  }
  return out;
}

Result<Reply> DecodeReply(std::string_view in) {
  if (in.size() < 6) return Malformed("reply shorter than its status");
  uint32_t code = GetLE<uint32_t>(in.data());
  size_t len = GetLE<uint16_t>(in.data() + 4);
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) ||
      len > kMaxReplyMessage || in.size() < 6 + len) {
    return Malformed("bad reply status");
  }
  Reply r;
  std::string msg(in.substr(6, len));
  r.status = Status(static_cast<absl::StatusCode>(code), msg);
  in.remove_prefix(6 + len);
  if (in.empty()) return r;
  if (!r.status.ok() || in.size() != kRecordHeaderSize) {
    return Malformed("unexpected bytes after reply status");
  }
  STAGGER_ASSIGN_OR_RETURN(r.record, DecodeRecordHeader(in));
  r.has_record = true;
  return r;
}

}  // namespace stagger::format
