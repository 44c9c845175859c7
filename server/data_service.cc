#include "server/data_service.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "format/codec.h"
#include "format/data_plane.h"
#include "server/chunk_read.h"
#include "server/tier/cold_read.h"
#include "server/tier/layout.h"
#include "util/log.h"

namespace stagger::server {
namespace {

using format::DataOp;

}  // namespace

void DataService::ReplyStatus(transport::ReplyChannel* reply, DataOp op,
                              const Status& s) {
  reply->Send(static_cast<uint16_t>(op), format::EncodeReply(s),
              transport::Buffer());
}

// Counts a request as in flight until its reply is sent (or dropped). After
// Send() it no longer touches the service: whoever holds the channel (the
// segment writer's callback, say) may destroy it after the service is gone.
class DataService::CountedReply : public transport::ReplyChannel {
 public:
  CountedReply(DataService* owner,
               std::unique_ptr<transport::ReplyChannel> inner)
      : owner_(owner), inner_(std::move(inner)) {}
  ~CountedReply() override {
    if (owner_ != nullptr) Done();  // dropped without a reply
  }
  void Send(uint16_t op, std::string header,
            transport::Buffer payload) override {
    inner_->Send(op, std::move(header), std::move(payload));
    if (owner_ != nullptr) Done();
  }

 private:
  void Done() {
    DataService* owner = owner_;
    owner_ = nullptr;
    owner->last_reply_ns_.store(absl::GetCurrentTimeNanos(),
                                std::memory_order_relaxed);
    absl::MutexLock lock(&owner->mu_);
    --owner->in_flight_;
  }
  DataService* owner_;
  std::unique_ptr<transport::ReplyChannel> inner_;
};

void DataService::StopAccepting() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
}

void DataService::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int64_t* n) { return *n == 0; }, &in_flight_));
}

DataService::DataService(SegmentStore* segments, MetaStore* meta,
                         Executor* ingest, Executor* readers,
                         IngestAdmission* admission)
    : segments_(segments),
      meta_(meta),
      ingest_(ingest),
      readers_(readers),
      admission_(admission),
      range_readers_(std::make_unique<Executor>(RangeThreads())) {}

int DataService::RangeThreads() {
  return std::clamp(2 * static_cast<int>(std::thread::hardware_concurrency()),
                    4, 16);
}

void DataService::SetIdentity(std::string server_id, std::string data_dir) {
  absl::MutexLock lock(&identity_mu_);
  server_id_ = std::move(server_id);
  data_dir_ = std::move(data_dir);
}

Status DataService::DiskFull(const Status& s) const {
  absl::MutexLock lock(&identity_mu_);
  std::string space;
  struct statvfs v;
  if (!data_dir_.empty() && ::statvfs(data_dir_.c_str(), &v) == 0) {
    space = absl::StrCat(
        "; ", static_cast<uint64_t>(v.f_bavail) * v.f_frsize, " bytes free of ",
        static_cast<uint64_t>(v.f_blocks) * v.f_frsize, " under ", data_dir_);
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("server ", server_id_, ": disk full (", s.message(), ")",
                   space, "; older checkpoints are intact"));
}

AdmissionStats DataService::admission_stats() const {
  return admission_ == nullptr ? AdmissionStats() : admission_->Stats();
}

void DataService::OnRequest(transport::Message request,
                            std::unique_ptr<transport::ReplyChannel> reply) {
  last_request_ns_.store(absl::GetCurrentTimeNanos(),
                         std::memory_order_relaxed);
  bool accepted;
  {
    absl::MutexLock lock(&mu_);
    accepted = accepting_;
    if (accepted) ++in_flight_;
  }
  if (!accepted) {
    {
      DataOp op = request.op == static_cast<uint16_t>(DataOp::kGetChunk)
                      ? DataOp::kGetChunkReply
                  : request.op == static_cast<uint16_t>(DataOp::kGetRange)
                      ? DataOp::kGetRangeReply
                      : DataOp::kPutChunkReply;
      ReplyStatus(reply.get(), op,
                  absl::UnavailableError("server is shutting down"));
      return;
    }
  }
  reply = std::make_unique<CountedReply>(this, std::move(reply));
  switch (static_cast<DataOp>(request.op)) {
    case DataOp::kPutChunk:
      HandlePut(std::move(request), std::move(reply));
      return;
    case DataOp::kGetChunk:
      HandleGet(std::move(request), std::move(reply));
      return;
    case DataOp::kGetRange:
      HandleGetRange(std::move(request), std::move(reply));
      return;
    case DataOp::kAuth:
      HandleAuth(std::move(request), std::move(reply));
      return;
    default:
      ++counters_.bad_requests;
      // Answer with the op the sender would expect least to misread.
      ReplyStatus(reply.get(), DataOp::kPutChunkReply,
                  absl::InvalidArgumentError(
                      absl::StrCat("unknown data-plane op ", request.op)));
  }
}

void DataService::HandleAuth(transport::Message request,
                             std::unique_ptr<transport::ReplyChannel> reply) {
  Status s;
  if (auth_ == nullptr) {
    s = absl::OkStatus();  // an open server: nothing to bind
  } else if (request.header.size() > format::kMaxDataKeyBytes) {
    ++counters_.bad_requests;
    s = absl::InvalidArgumentError("data-plane key too long");
  } else {
    auto grant = auth_->CheckDataKey(request.header);
    s = grant.status();
    if (grant.ok()) {
      absl::MutexLock l(&peers_mu_);
      peers_[request.peer] = *grant;
      while (peers_.size() > Authorizer::kMaxKeys) peers_.erase(peers_.begin());
    }
  }
  ReplyStatus(reply.get(), DataOp::kAuthReply, s);
}

Status DataService::Allowed(uint64_t peer, const std::string& job) {
  if (auth_ == nullptr) return absl::OkStatus();
  const Grant* grant = nullptr;
  {
    absl::MutexLock l(&peers_mu_);
    auto it = peers_.find(peer);
    if (it != peers_.end()) grant = it->second;
  }
  if (grant == nullptr) {
    return absl::UnauthenticatedError(
        "this connection has not presented the data-plane key from Hello");
  }
  return Authorizer::CheckJob(*grant, job);
}

void DataService::HandlePut(transport::Message request,
                            std::unique_ptr<transport::ReplyChannel> reply) {
  auto req = format::DecodePutChunk(request.header);
  if (!req.ok()) {
    ++counters_.bad_requests;
    ReplyStatus(reply.get(), DataOp::kPutChunkReply, req.status());
    return;
  }
  if (Status a = Allowed(request.peer, req->job); !a.ok()) {
    ReplyStatus(reply.get(), DataOp::kPutChunkReply, a);
    return;
  }
  counters_.bytes_received += request.payload.size();
  job_counters_.AddReceived(req->job, request.payload.size());
  ++counters_.puts_in_flight;
  // Answered exactly once, whichever way the put ends.
  std::shared_ptr<transport::ReplyChannel> shared(
      reply.release(), [this](transport::ReplyChannel* r) {
        delete r;
        --counters_.puts_in_flight;
      });
  auto payload =
      std::make_shared<transport::Buffer>(std::move(request.payload));
  // Off the progress thread: the index lookup may touch disk and the store
  // checksums the payload.
  ingest_->Submit([this, shared, payload, r = *req] {
    Ingest(shared, std::move(*payload), r);
  });
}

Result<std::optional<format::ChunkId>> DataService::StoredBaseOf(
    const format::PutChunkRequest& r, std::string_view payload) {
  if (!format::IsDelta(r.record.codec)) return std::nullopt;
  STAGGER_ASSIGN_OR_RETURN(format::ChunkId base, format::DeltaBase(payload));
  // Held and not yet written (a held copy also on disk is in the index,
  // unless a gc deleted it: then it counts as gone).
  if (memory_ != nullptr &&
      memory_->StateOf(r.job, base) == MemoryTier::State::kMemoryOnly) {
    return base;
  }
  Status s = meta_->GetChunk(r.job, base).status();
  if (absl::IsNotFound(s)) {
    return absl::FailedPreconditionError(
        absl::StrCat("delta chunk ", r.record.chunk_id.ToHex(), " needs base ",
                     base.ToHex(), ", which is not stored"));
  }
  STAGGER_RETURN_IF_ERROR(s);
  return base;
}

void DataService::Ingest(std::shared_ptr<transport::ReplyChannel> reply,
                         transport::Buffer payload,
                         const format::PutChunkRequest& r) {
  // Content-addressed: an index hit means these bytes are already durable.
  // ...unless a read found that copy bad: then the put repairs it. A put
  // flagged in_memory is satisfied by a copy held in memory, not yet
  // written, too (one on disk is in the index, unless a gc deleted it).
  const bool marked_bad = meta_->IsMarkedBad(r.job, r.record.chunk_id);
  if (!marked_bad && (meta_->GetChunk(r.job, r.record.chunk_id).ok() ||
                      (r.in_memory && memory_ != nullptr &&
                       memory_->StateOf(r.job, r.record.chunk_id) ==
                           MemoryTier::State::kMemoryOnly))) {
    ++counters_.chunks_deduplicated;
    ReplyStatus(reply.get(), DataOp::kPutChunkReply, absl::OkStatus());
    return;
  }
  auto base = StoredBaseOf(r, payload.view());
  if (!base.ok()) {
    ++counters_.bad_requests;
    ReplyStatus(reply.get(), DataOp::kPutChunkReply, base.status());
    return;
  }
  if (r.in_memory && memory_ != nullptr && !marked_bad &&
      HoldInMemory(reply.get(), &payload, r, *base)) {
    return;
  }
  // The store checks the payload against the header (length, crc32c)
  // before queueing it; a mismatch comes back through the callback.
  segments_->Append(
      r.job, r.record, std::move(payload),
      [this, reply, r, base = *base](Result<ChunkLocation> loc) {
        Stored(reply.get(), r, base, loc);
      },
      AppendOptions{.lifetime = SavedLifetime()});
}

namespace {

// The status of a put's reply, for a put made inside the server.
class StatusReply final : public transport::ReplyChannel {
 public:
  explicit StatusReply(std::function<void(Status)> done)
      : done_(std::move(done)) {}
  ~StatusReply() override {
    if (done_) done_(absl::InternalError("put ended without a reply"));
  }
  void Send(uint16_t, std::string header, transport::Buffer) override {
    auto r = format::DecodeReply(header);
    auto done = std::exchange(done_, nullptr);
    if (done) done(r.ok() ? r->status : r.status());
  }

 private:
  std::function<void(Status)> done_;
};

}  // namespace

void DataService::StoreCopy(const std::string& job,
                            const format::RecordHeader& header,
                            transport::Buffer payload,
                            std::function<void(Status)> done) {
  format::PutChunkRequest r;
  r.job = job;
  r.record = header;
  auto reply = std::make_shared<StatusReply>(std::move(done));
  ingest_->Submit([this, reply, r,
                   p = std::make_shared<transport::Buffer>(std::move(
                       payload))] { Ingest(reply, std::move(*p), r); });
}

Status DataService::IndexAppended(const std::string& job,
                                  const format::RecordHeader& header,
                                  const std::optional<format::ChunkId>& base,
                                  const Result<ChunkLocation>& loc) {
  Status s = loc.status();
  if (absl::IsResourceExhausted(s)) return DiskFull(s);
  if (!s.ok()) return s;
  ChunkMeta meta;
  meta.location = *loc;
  meta.raw_length = header.raw_length;
  meta.stored_length = header.encoded_length;
  meta.codec = header.codec;
  meta.base = base;
  STAGGER_RETURN_IF_ERROR(meta_->PutChunk(job, header.chunk_id, meta));
  ++counters_.chunks_written;
  counters_.bytes_written += header.encoded_length;
  job_counters_.AddWritten(job, header.encoded_length);
  return absl::OkStatus();
}

void DataService::Stored(transport::ReplyChannel* reply,
                         const format::PutChunkRequest& r,
                         const std::optional<format::ChunkId>& base,
                         const Result<ChunkLocation>& loc) {
  const std::string& job = r.job;
  const format::RecordHeader& header = r.record;
  Status s = IndexAppended(job, header, base, loc);
  if (s.ok()) {
    if (memory_ != nullptr) memory_->StoredElsewhere(job, header.chunk_id);
  } else if (absl::IsDataLoss(s) || absl::IsInvalidArgument(s)) {
    ++counters_.bad_requests;
  }
  ReplyStatus(reply, DataOp::kPutChunkReply,
              WithContext(s, absl::StrCat("chunk ", header.chunk_id.ToHex())));
  if (s.ok() && base && rebaser_ != nullptr) {
    rebaser_->Enqueue(job, header.chunk_id);
  } else if (s.ok() && !base && r.previous && rebaser_ != nullptr) {
    rebaser_->EnqueueWhole(job, header.chunk_id, *r.previous, r.element_size);
  }
}

void DataService::HandleGet(transport::Message request,
                            std::unique_ptr<transport::ReplyChannel> reply) {
  auto req = format::DecodeGetChunk(request.header);
  if (!req.ok()) {
    ++counters_.bad_requests;
    ReplyStatus(reply.get(), DataOp::kGetChunkReply, req.status());
    return;
  }
  if (Status a = Allowed(request.peer, req->job); !a.ok()) {
    ReplyStatus(reply.get(), DataOp::kGetChunkReply, a);
    return;
  }
  std::shared_ptr<transport::ReplyChannel> shared(std::move(reply));
  const uint64_t peer = request.peer;
  readers_->Submit([this, shared, peer, r = *req] {
    if (memory_ != nullptr) {
      // Memory first: no disk read, and no copy (the reply keeps the
      // held bytes alive while the transport sends them).
      std::optional<MemoryTier::Record> held = memory_->Find(r.job, r.id);
      if (held && held->base) {
        // A delta held since its put: once written behind, the rebaser may
        // have made it whole on disk and its base a delta of it. Serving
        // the held delta then would send the client round in a circle
        // (this chunk -> its base on disk -> this chunk): the index's
        // version goes instead.
        auto indexed = meta_->GetChunk(r.job, r.id);
        if (indexed.ok() && indexed->base != held->base) held.reset();
      }
      if (held) {
        StoredRecord rec;
        rec.header = held->header;
        rec.payload =
            DecodedChunks::Slice(held->payload, 0, held->payload->size());
        SendRecord(shared.get(), r.job, std::move(rec));
        return;
      }
    }
    auto meta = meta_->GetChunk(r.job, r.id);
    if (absl::IsNotFound(meta.status()) && cold_ != nullptr) {
      // A step imported from the cold store, or a base only it holds.
      ServeFromCold(shared, peer, r);
      return;
    }
    if (!meta.ok()) {
      ReplyStatus(shared.get(), DataOp::kGetChunkReply, meta.status());
      return;
    }
    AdmitRead(
        peer, meta->location.record_size, readers_,
        [this, shared, r, m = *meta] { ReadAndReply(shared.get(), r, m); });
  });
}

void DataService::AdmitRead(uint64_t peer, uint64_t bytes, Executor* on,
                            std::function<void()> read) {
  if (admission_ == nullptr) {
    read();
    return;
  }
  // Restore traffic first: once this reservation is queued, no checkpoint
  // pull is granted before it. The grant comes on whichever thread freed
  // the credit; the read goes back to `on`.
  admission_->RequestRestore(peer, bytes,
                             [this, on, peer, bytes, read = std::move(read)] {
                               on->Submit([this, peer, bytes, read] {
                                 read();
                                 admission_->Release(peer, bytes);
                               });
                             });
}

void DataService::NoteBadCopy(const std::string& job, const format::ChunkId& id,
                              const Status& bad, bool reading_cold) {
  ++counters_.verify_failures;
  // The next put of this chunk (a client's repair, a later save) rewrites
  // it.
  Status marked = meta_->MarkBad(job, id);
  log::Warning("stagger-server",
               absl::StrCat("job '", job, "': ", bad.message(),
                            marked.ok() ? "; marked for repair" : "",
                            marked.ok() ? "" : "; marking it failed: ",
                            marked.ok() ? "" : marked.message(),
                            reading_cold ? "; reading it from " : "",
                            reading_cold ? cold_->Describe() : ""));
}

void DataService::ReadAndReply(transport::ReplyChannel* reply,
                               const format::GetChunkRequest& r,
                               const ChunkMeta& meta) {
  // Follows the record if compaction moves it during the read.
  auto rec = ReadChunk(meta_, segments_, r.job, r.id, meta);
  if (absl::IsDataLoss(rec.status())) {
    NoteBadCopy(r.job, r.id, rec.status(), cold_ != nullptr);
    if (cold_ != nullptr) {
      Result<StoredRecord> copy = tier::ReadColdChunk(cold_, r.job, r.id);
      // No good copy there either: the client hears of the bad one here.
      if (copy.ok()) rec = std::move(copy);
    }
  }
  if (!rec.ok()) {
    ReplyStatus(reply, DataOp::kGetChunkReply, rec.status());
    return;
  }
  SendRecord(reply, r.job, std::move(*rec));
}

void DataService::SendRecord(transport::ReplyChannel* reply,
                             const std::string& job, StoredRecord rec) {
  ++counters_.chunks_read;
  counters_.bytes_read += rec.payload.size();
  job_counters_.AddRead(job, rec.payload.size());
  reply->Send(static_cast<uint16_t>(DataOp::kGetChunkReply),
              format::EncodeReply(absl::OkStatus(), &rec.header),
              std::move(rec.payload));
}

void DataService::SetColdStore(tier::ObjectStore* cold) {
  cold_ = cold;
  cold_readers_ = std::make_unique<Executor>(kColdReaders);
  cold_buffers_ = transport::BufferPool::Create(kColdBufferCacheBytes);
}

void DataService::ServeFromCold(std::shared_ptr<transport::ReplyChannel> reply,
                                uint64_t peer,
                                const format::GetChunkRequest& r) {
  cold_readers_->Submit([this, reply, peer, r] {
    // Restore traffic, admitted by the object's size: the reader's hint
    // when it gave a plausible one (one request to the store), else a stat.
    Result<std::optional<uint64_t>> size = std::optional<uint64_t>();
    if (r.size_hint >= format::kRecordHeaderSize &&
        r.size_hint <=
            format::kRecordHeaderSize + format::kMaxChunkEncodedBytes) {
      size = std::optional<uint64_t>(r.size_hint);
    } else {
      size = cold_->Size(tier::ChunkObject(r.job, r.id));
    }
    if (!size.ok() || !size->has_value()) {
      ReplyFromCold(reply.get(), r);  // replies the error, if any
      return;
    }
    const uint64_t bytes = **size;
    if (admission_ == nullptr) {
      ReplyFromCold(reply.get(), r, bytes);
      return;
    }
    admission_->RequestRestore(peer, bytes, [this, reply, peer, bytes, r] {
      cold_readers_->Submit([this, reply, peer, bytes, r] {
        ReplyFromCold(reply.get(), r, bytes);
        admission_->Release(peer, bytes);
      });
    });
  });
}

void DataService::ReplyFromCold(transport::ReplyChannel* reply,
                                const format::GetChunkRequest& r,
                                std::optional<uint64_t> size) {
  Result<StoredRecord> rec =
      tier::ReadColdChunk(cold_, r.job, r.id, size, cold_buffers_.get());
  if (!rec.ok()) {
    if (absl::IsDataLoss(rec.status())) {
      ++counters_.verify_failures;
      log::Warning("stagger-server",
                   absl::StrCat("job '", r.job, "': ", rec.status().message()));
    }
    ReplyStatus(
        reply, DataOp::kGetChunkReply,
        WithContext(rec.status(), absl::StrCat("chunk ", r.id.ToHex())));
    return;
  }
  SendRecord(reply, r.job, std::move(*rec));
}

}  // namespace stagger::server
