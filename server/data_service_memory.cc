// DataService and the memory tier: puts held in RAM and acknowledged, the
// write-behind thread that stores them in the segment store.
#include <utility>

#include "absl/strings/str_cat.h"
#include "format/codec.h"
#include "server/data_service.h"
#include "util/log.h"

namespace stagger::server {
namespace {

using format::DataOp;

// The checks the segment store makes before it queues a record: a held
// chunk must be one the store will take and a reader can use.
Status CheckRecord(const std::string& job, const format::RecordHeader& h,
                   std::string_view payload) {
  char encoded[format::kRecordHeaderSize];
  format::EncodeRecordHeader(h, encoded);
  Status s =
      format::DecodeRecordHeader(std::string_view(encoded, sizeof(encoded)))
          .status();
  if (s.ok()) s = format::VerifyPayload(h, payload);
  return WithContext(s, absl::StrCat("put to job ", job));
}

}  // namespace

void DataService::SetMemoryTier(MemoryTier* memory,
                                std::function<bool()> busy) {
  memory_ = memory;
  write_behind_yield_ =
      std::make_unique<qos::BackgroundLimiter>(qos::BackgroundLimiterOptions{
          .clients_busy =
              [this, busy = std::move(busy)] {
                return (busy && busy()) || RecentRequest();
              },
          .max_yield_ns = absl::ToInt64Nanoseconds(kWriteBehindYield)});
  write_behind_ = std::thread([this] { WriteBehindLoop(); });
}

DataService::~DataService() {
  if (write_behind_.joinable()) {
    memory_->Stop();
    write_behind_.join();
  }
  absl::MutexLock l(&write_behind_mu_);
  write_behind_mu_.Await(absl::Condition(
      +[](uint64_t* n) { return *n == 0; }, &write_behind_bytes_));
}

bool DataService::RecentRequest() const {
  const int64_t last = last_request_ns_.load(std::memory_order_relaxed);
  return absl::GetCurrentTimeNanos() - last <
         absl::ToInt64Nanoseconds(kRecentRequest);
}

bool DataService::ClientTraffic() {
  {
    absl::MutexLock lock(&mu_);
    if (in_flight_ > 0) return true;
  }
  const int64_t last = last_reply_ns_.load(std::memory_order_relaxed);
  return absl::GetCurrentTimeNanos() - last <
         absl::ToInt64Nanoseconds(kClientQuiet);
}

bool DataService::HoldInMemory(transport::ReplyChannel* reply,
                               transport::Buffer* payload,
                               const format::PutChunkRequest& r,
                               const std::optional<format::ChunkId>& base) {
  Status s = CheckRecord(r.job, r.record, payload->view());
  if (!s.ok()) {
    ++counters_.bad_requests;
    ReplyStatus(
        reply, DataOp::kPutChunkReply,
        WithContext(s, absl::StrCat("chunk ", r.record.chunk_id.ToHex())));
    return true;
  }
  if (!memory_->Hold(r.job, r.record, base, payload)) return false;
  ReplyStatus(reply, DataOp::kPutChunkReply, absl::OkStatus());
  return true;
}

void DataService::WriteBehindLoop() {
  while (std::optional<MemoryTier::Record> rec = memory_->NextToWrite()) {
    const uint64_t n = rec->header.encoded_length;
    // Client traffic first: hold back while it is in the server, but never
    // longer than kWriteBehindYield per chunk (the tier must drain).
    write_behind_yield_->Request(n, qos::Priority::kBackground).IgnoreError();
    {
      absl::MutexLock l(&write_behind_mu_);
      struct Room {
        uint64_t* used;
        uint64_t n;
      } room{&write_behind_bytes_, n};
      write_behind_mu_.Await(absl::Condition(
          +[](Room* r) {
            return *r->used == 0 || *r->used + r->n <= kWriteBehindBytes;
          },
          &room));
      write_behind_bytes_ += n;
    }
    // The held bytes themselves, kept alive until written: the store
    // writes the record header into the room in front of them (a received
    // payload has it) and never touches the payload, which readers may be
    // sending meanwhile. Without the room the store copies them.
    transport::Buffer bytes = DecodedChunks::Slice(rec->payload, 0, n);
    segments_->Append(
        rec->job, rec->header, std::move(bytes),
        [this, r = *rec](Result<ChunkLocation> loc) { WrittenBehind(r, loc); },
        AppendOptions{.payload_checked = true, .lifetime = SavedLifetime()});
  }
}

void DataService::WrittenBehind(const MemoryTier::Record& rec,
                                const Result<ChunkLocation>& loc) {
  Status s = IndexAppended(rec.job, rec.header, rec.base, loc);
  memory_->Written(rec.job, rec.header.chunk_id, s);
  if (s.ok()) {
    if (rec.base && rebaser_ != nullptr) {
      rebaser_->Enqueue(rec.job, rec.header.chunk_id);
    }
  } else {
    log::Warning("stagger-server",
                 absl::StrCat("job '", rec.job, "': writing chunk ",
                              rec.header.chunk_id.ToHex(),
                              " from memory to disk failed (kept in memory, "
                              "tried again): ",
                              s.message()));
  }
  absl::MutexLock l(&write_behind_mu_);
  write_behind_bytes_ -= rec.header.encoded_length;
}

Status DataService::FinishWriteBehind(absl::Duration timeout) {
  if (memory_ == nullptr || !write_behind_.joinable()) return absl::OkStatus();
  memory_->WriteAllNow();
  const MemoryTier::Stats st = memory_->stats();
  Status s = absl::OkStatus();
  const absl::Time deadline = absl::Now() + timeout;
  for (const auto& [job, usage] : st.jobs) {
    if (usage.memory_only_bytes == 0) continue;
    // Every chunk of the job: those on disk already pass at once.
    s.Update(memory_->WaitJobWritten(job, deadline));
  }
  memory_->Stop();
  write_behind_.join();
  absl::MutexLock l(&write_behind_mu_);
  write_behind_mu_.Await(absl::Condition(
      +[](uint64_t* n) { return *n == 0; }, &write_behind_bytes_));
  return s;
}

}  // namespace stagger::server
