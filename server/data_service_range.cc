// DataService's GetRange: part of a chunk's decoded bytes. The server reads
// the record (and its delta bases), decodes it and checks every link
// against its chunk id, as a client checks a GetChunk reply, and sends the
// range with its CRC-32C, which the client checks. A reshard that needs a
// few rows of a chunk then moves only those, and the ranks that each need
// part of one chunk have it decoded once (DecodedChunks).
//
// Only chunks in this server's index are served this way. NOT_FOUND (a
// chunk only the cold tier holds) and DATA_LOSS (a copy found bad, marked
// for repair) send the client to GetChunk, which reads the cold tier, tries
// the other copies and repairs.
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "format/codec.h"
#include "format/crc32c.h"
#include "format/data_plane.h"
#include "server/chunk_read.h"
#include "server/data_service.h"
#include "util/log.h"

namespace stagger::server {
namespace {

using format::DataOp;

// As a client follows them (client/chunk_io.cc): chains far longer than
// any a writer or the rebaser leaves are corrupt.
constexpr int kMaxDeltaDepth = 1024;

void ReplyRangeStatus(transport::ReplyChannel* reply, const Status& s) {
  reply->Send(static_cast<uint16_t>(DataOp::kGetRangeReply),
              format::EncodeRangeReply(s), transport::Buffer());
}

}  // namespace

void DataService::HandleGetRange(
    transport::Message request,
    std::unique_ptr<transport::ReplyChannel> reply) {
  auto req = format::DecodeGetRange(request.header);
  if (!req.ok()) {
    ++counters_.bad_requests;
    ReplyRangeStatus(reply.get(), req.status());
    return;
  }
  if (Status a = Allowed(request.peer, req->job); !a.ok()) {
    ReplyRangeStatus(reply.get(), a);
    return;
  }
  std::shared_ptr<transport::ReplyChannel> shared(std::move(reply));
  const uint64_t peer = request.peer;
  range_readers_->Submit([this, shared, peer, r = *req] {
    auto meta = meta_->GetChunk(r.job, r.id);
    if (!meta.ok()) {
      ReplyRangeStatus(shared.get(), meta.status());
      return;
    }
    for (const format::ChunkPart& p : r.parts) {
      if (p.offset + p.length > meta->raw_length) {
        ++counters_.bad_requests;
        ReplyRangeStatus(
            shared.get(),
            absl::OutOfRangeError(absl::StrCat(
                "part of ", p.length, " bytes at ", p.offset, " of chunk ",
                r.id.ToHex(), " ends past its ", meta->raw_length, " bytes")));
        return;
      }
    }
    // Restore traffic, as a GetChunk of the record.
    AdmitRead(peer, meta->location.record_size, range_readers_.get(),
              [this, shared, r, m = *meta] {
                ReadRangeAndReply(shared.get(), r, m);
              });
  });
}

Result<transport::Buffer> DataService::DecodeWhole(const std::string& job,
                                                   const format::ChunkId& id,
                                                   const ChunkMeta& meta) {
  // A raw chunk is hashed against its id below: its CRC would be a second
  // pass over the same bytes.
  IOOptions io;
  io.check_payload = meta.codec != format::Codec::kRaw;
  STAGGER_ASSIGN_OR_RETURN(StoredRecord rec,
                           ReadChunk(meta_, segments_, job, id, meta, io));
  const format::Codec codec = rec.header.codec;
  if (!io.check_payload && codec != format::Codec::kRaw) {
    // The record changed since the index was read (a rebase): check it
    // before a decoder sees it.
    STAGGER_RETURN_IF_ERROR_CTX(
        format::VerifyPayload(rec.header, rec.payload.view()), "chunk ",
        id.ToHex());
  }
  if (format::IsDelta(codec)) {
    // Down the chain of bases, reading this record again (rare: the
    // rebaser keeps the newest version of a chunk whole).
    transport::Buffer out = decoded_.NewBuffer(meta.raw_length);
    STAGGER_RETURN_IF_ERROR(DecodeStoredChunk(
        meta_, segments_, job, id, meta, out.data(), nullptr, kMaxDeltaDepth));
    return out;
  }
  transport::Buffer out;
  if (codec == format::Codec::kRaw) {
    out = std::move(rec.payload);  // the record's payload is the chunk
  } else {
    out = decoded_.NewBuffer(rec.header.raw_length);
    STAGGER_RETURN_IF_ERROR_CTX(
        format::Decode(codec, rec.payload.view(), out.data(), out.size()),
        "chunk ", id.ToHex());
  }
  if (out.size() != meta.raw_length ||
      format::ChunkId::Of(out.data(), out.size()) != id) {
    return absl::DataLossError(absl::StrCat(
        "chunk ", id.ToHex(), " decodes to other bytes than its id"));
  }
  return out;
}

void DataService::ReadRangeAndReply(transport::ReplyChannel* reply,
                                    const format::GetRangeRequest& r,
                                    const ChunkMeta& meta) {
  uint64_t total = 0;
  for (const format::ChunkPart& p : r.parts) total += p.length;
  Result<DecodedChunks::Bytes> whole =
      decoded_.Get(r.job, r.id, meta.raw_length, total,
                   [&] { return DecodeWhole(r.job, r.id, meta); });
  // The client then asks for the whole chunk, which the cold tier may
  // serve.
  if (absl::IsDataLoss(whole.status()))
    NoteBadCopy(r.job, r.id, whole.status(), false);
  if (!whole.ok()) {
    ReplyRangeStatus(reply, whole.status());  // it names the chunk
    return;
  }
  // One part is sent from the decoded chunk itself; several are gathered.
  transport::Buffer parts;
  if (r.parts.size() == 1) {
    parts = DecodedChunks::Slice(*whole, r.parts[0].offset, total);
  } else {
    parts = decoded_.NewBuffer(total);
    char* at = parts.data();
    for (const format::ChunkPart& p : r.parts) {
      std::memcpy(at, (*whole)->data() + p.offset, p.length);
      at += p.length;
    }
  }
  const uint32_t crc = format::Crc32c(parts.data(), parts.size());
  ++counters_.ranges_read;
  counters_.bytes_read += total;
  job_counters_.AddRead(r.job, total);
  reply->Send(static_cast<uint16_t>(DataOp::kGetRangeReply),
              format::EncodeRangeReply(absl::OkStatus(), crc),
              std::move(parts));
}

}  // namespace stagger::server
