// ControlService: chunk records between servers, for the promoter's
// repair of a degraded memory-level step (server/promoter.h).
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "format/record.h"
#include "server/chunk_read.h"
#include "server/control_service.h"
#include "server/data_service.h"

namespace stagger::server {
namespace {

constexpr int kMaxReadRecordIds = 4096;

}  // namespace

grpc::Status ControlService::ReadRecords(
    grpc::ServerContext* ctx, const pb::ReadRecordsRequest* req,
    grpc::ServerWriter<pb::ChunkRecord>* writer) {
  if (Status a = Authorize(ctx, req->job()); !a.ok()) return ToGrpc(a);
  if (segments_ == nullptr) {
    return ToGrpc(absl::FailedPreconditionError("no segment store here"));
  }
  if (req->ids_size() > kMaxReadRecordIds) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("read of ", req->ids_size(), " records, more than ",
                     kMaxReadRecordIds)));
  }
  for (const std::string& bytes : req->ids()) {
    auto id = format::ChunkId::FromBytes(bytes);
    if (!id.ok()) {
      return ToGrpc(absl::InvalidArgumentError("a chunk id is not 16 bytes"));
    }
    Result<StoredRecord> rec = ReadChunk(meta_, segments_, req->job(), *id);
    if (!rec.ok()) return ToGrpc(rec.status());  // it names the chunk
    pb::ChunkRecord out;
    out.set_job(req->job());
    std::string header(format::kRecordHeaderSize, '\0');
    format::EncodeRecordHeader(rec->header, header.data());
    out.set_header(std::move(header));
    out.set_payload(std::string(rec->payload.view()));
    if (!writer->Write(out)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "reader went away");
    }
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::StoreRecords(
    grpc::ServerContext* ctx, grpc::ServerReader<pb::ChunkRecord>* reader,
    pb::StoreRecordsReply* reply) {
  if (data_ == nullptr) {
    return ToGrpc(absl::FailedPreconditionError("no data service here"));
  }
  pb::ChunkRecord rec;
  while (reader->Read(&rec)) {
    if (Status a = Authorize(ctx, rec.job()); !a.ok()) return ToGrpc(a);
    auto header = format::DecodeRecordHeader(rec.header());
    if (!header.ok()) {
      return ToGrpc(WithContext(header.status(),
                                absl::StrCat("record for job ", rec.job())));
    }
    transport::Buffer payload(rec.payload().size());
    if (!rec.payload().empty()) {
      std::memcpy(payload.data(), rec.payload().data(), rec.payload().size());
    }
    Status stored;
    absl::Notification done;
    data_->StoreCopy(rec.job(), *header, std::move(payload),
                     [&stored, &done](Status s) {
                       stored = std::move(s);
                       done.Notify();
                     });
    done.WaitForNotification();
    if (!stored.ok()) {
      return ToGrpc(WithContext(
          stored, absl::StrCat("chunk ", header->chunk_id.ToHex())));
    }
    reply->set_stored(reply->stored() + 1);
  }
  return grpc::Status::OK;
}

}  // namespace stagger::server
