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
  const uint8_t flags =
      (r.in_memory ? kPutInMemory : 0) | (r.previous ? kPutHasPrevious : 0);
  if (flags != 0) out.push_back(static_cast<char>(flags));
  if (r.previous) {
    out += r.previous->ToBytes();
    out.push_back(static_cast<char>(r.element_size));
  }
  return out;
}

Result<PutChunkRequest> DecodePutChunk(std::string_view in) {
  PutChunkRequest r;
  STAGGER_ASSIGN_OR_RETURN(r.job, TakeJob(&in));
  if (in.size() > kRecordHeaderSize) {
    const uint8_t flags = static_cast<uint8_t>(in[kRecordHeaderSize]);
    if ((flags & ~(kPutInMemory | kPutHasPrevious)) != 0) {
      return Malformed(
          absl::StrCat("unknown PutChunk flags 0x", absl::Hex(flags)));
    }
    const size_t extra = (flags & kPutHasPrevious) != 0 ? 17 : 0;
    if (in.size() != kRecordHeaderSize + 1 + extra) {
      return Malformed("PutChunk flags followed by the wrong number of bytes");
    }
    r.in_memory = (flags & kPutInMemory) != 0;
    if (extra > 0) {
      const std::string_view p = in.substr(kRecordHeaderSize + 1);
      STAGGER_ASSIGN_OR_RETURN(ChunkId prev,
                               ChunkId::FromBytes(p.substr(0, 16)));
      r.previous = prev;
      r.element_size = static_cast<uint8_t>(p[16]);
      if (r.element_size != 1 && r.element_size != 2 && r.element_size != 4 &&
          r.element_size != 8) {
        return Malformed(absl::StrCat("PutChunk element size ", r.element_size,
                                      " is not 1, 2, 4 or 8"));
      }
    }
    in = in.substr(0, kRecordHeaderSize);
  }
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
  if (r.size_hint > 0) {
    char n[8];
    PutLE<uint64_t>(n, r.size_hint);
    out.append(n, 8);
  }
  return out;
}

Result<GetChunkRequest> DecodeGetChunk(std::string_view in) {
  GetChunkRequest r;
  STAGGER_ASSIGN_OR_RETURN(r.job, TakeJob(&in));
  if (in.size() != 16 && in.size() != 24) {
    return Malformed(
        "GetChunk needs a 16-byte chunk id and an optional 8-byte size hint");
  }
  STAGGER_ASSIGN_OR_RETURN(r.id, ChunkId::FromBytes(in.substr(0, 16)));
  if (in.size() == 24) r.size_hint = GetLE<uint64_t>(in.data() + 16);
  return r;
}

std::string EncodeGetRange(const GetRangeRequest& r) {
  std::string out;
  PutJob(&out, r.job);
  out += r.id.ToBytes();
  char n[16];
  PutLE<uint32_t>(n, static_cast<uint32_t>(r.parts.size()));
  out.append(n, 4);
  for (const ChunkPart& p : r.parts) {
    PutLE<uint64_t>(n, p.offset);
    PutLE<uint64_t>(n + 8, p.length);
    out.append(n, 16);
  }
  return out;
}

Result<GetRangeRequest> DecodeGetRange(std::string_view in) {
  GetRangeRequest r;
  STAGGER_ASSIGN_OR_RETURN(r.job, TakeJob(&in));
  if (in.size() < 20) {
    return Malformed("GetRange needs a 16-byte chunk id and a part count");
  }
  STAGGER_ASSIGN_OR_RETURN(r.id, ChunkId::FromBytes(in.substr(0, 16)));
  const uint32_t count = GetLE<uint32_t>(in.data() + 16);
  if (count == 0 || count > kMaxRangeParts) {
    return Malformed(absl::StrCat("GetRange of ", count, " parts (1 to ",
                                  kMaxRangeParts, ")"));
  }
  const std::string_view payload = in.substr(20);
  if (payload.size() != 16ull * count) {
    return Malformed(absl::StrCat("GetRange of ", count, " parts carries ",
                                  payload.size(), " bytes of them"));
  }
  uint64_t total = 0;
  r.parts.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    ChunkPart& p = r.parts[i];
    p.offset = GetLE<uint64_t>(payload.data() + 16 * i);
    p.length = GetLE<uint64_t>(payload.data() + 16 * i + 8);
    if (p.length == 0 || p.length > kMaxChunkRawBytes ||
        p.offset > kMaxChunkRawBytes - p.length) {
      return Malformed(absl::StrCat(
          "GetRange part ", i, " of ", p.length, " bytes at ", p.offset,
          " (a chunk holds 1 to ", kMaxChunkRawBytes, ")"));
    }
    total += p.length;
    if (total > kMaxChunkRawBytes) {
      return Malformed(absl::StrCat("GetRange parts add up to more than ",
                                    kMaxChunkRawBytes, " bytes"));
    }
  }
  return r;
}

namespace {

std::string StatusBytes(const Status& status) {
  std::string msg(status.message().substr(0, kMaxReplyMessage));
  std::string out(6, '\0');
  PutLE<uint32_t>(out.data(), static_cast<uint32_t>(status.code()));
  PutLE<uint16_t>(out.data() + 4, static_cast<uint16_t>(msg.size()));
  out += msg;
  return out;
}

// Takes the status off the front of a reply; advances `in`.
Result<Status> TakeStatus(std::string_view* in) {
  if (in->size() < 6) return Malformed("reply shorter than its status");
  uint32_t code = GetLE<uint32_t>(in->data());
  size_t len = GetLE<uint16_t>(in->data() + 4);
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) ||
      len > kMaxReplyMessage || in->size() < 6 + len) {
    return Malformed("bad reply status");
  }
  Status s(static_cast<absl::StatusCode>(code),
           std::string(in->substr(6, len)));
  in->remove_prefix(6 + len);
  return s;
}

}  // namespace

std::string EncodeRangeReply(const Status& status, uint32_t crc32c) {
  std::string out = StatusBytes(status);
  if (status.ok()) {
    char c[4];
    PutLE<uint32_t>(c, crc32c);
    out.append(c, sizeof c);
  }
  return out;
}

Result<RangeReply> DecodeRangeReply(std::string_view in) {
  RangeReply r;
  STAGGER_ASSIGN_OR_RETURN(r.status, TakeStatus(&in));
  if (!r.status.ok()) {
    if (!in.empty()) return Malformed("unexpected bytes after reply status");
    return r;
  }
  if (in.size() != 4) return Malformed("range reply without its CRC-32C");
  r.crc32c = GetLE<uint32_t>(in.data());
  return r;
}

std::string EncodeReply(const Status& status, const RecordHeader* record) {
  std::string out = StatusBytes(status);
  if (status.ok() && record != nullptr) {
    char h[kRecordHeaderSize];
    EncodeRecordHeader(*record, h);
    out.append(h, sizeof h);
  }
  return out;
}

Result<Reply> DecodeReply(std::string_view in) {
  Reply r;
  STAGGER_ASSIGN_OR_RETURN(r.status, TakeStatus(&in));
  if (in.empty()) return r;
  if (!r.status.ok() || in.size() != kRecordHeaderSize) {
    return Malformed("unexpected bytes after reply status");
  }
  STAGGER_ASSIGN_OR_RETURN(r.record, DecodeRecordHeader(in));
  r.has_record = true;
  return r;
}

}  // namespace stagger::format
