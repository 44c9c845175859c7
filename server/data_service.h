// DataService: the server's data-plane request handler. PutChunk requests
// go to the SegmentStore (group-committed, fdatasynced) and then into the
// chunk index; the reply is sent only after both. GetChunk requests are
// read and verified on an executor thread and answered with the record.
//
// Nothing in a request is trusted: names, lengths and the payload checksum
// are checked before anything is written. A chunk already stored for the
// job is acknowledged without writing it again (chunks are content-addressed).
//
// Admission (with an IngestAdmission): put payloads arrive already charged
// by the transport (the listener was given the same admission) and are
// released when the segment store drops them; a GetChunk reserves its
// record's bytes as restore traffic after the index lookup and before the
// read, and releases them once the reply is sent.
//
// Threads: OnRequest runs on the transport's progress thread and only
// decodes headers and queues; checksums, the index lookup and the hand-off
// to the segment store run on `ingest`; writes complete on the segment
// writer thread; reads run on `readers`.
#ifndef STAGGER_SERVER_DATA_SERVICE_H_
#define STAGGER_SERVER_DATA_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "format/data_plane.h"
#include "qos/rate_limiter.h"
#include "server/auth.h"
#include "server/decoded_chunks.h"
#include "server/ingest_admission.h"
#include "server/job_counters.h"
#include "server/memory_tier.h"
#include "server/meta_store.h"
#include "server/rebaser.h"
#include "server/storage/segment_store.h"
#include "transport/buffer_pool.h"
#include "transport/transport.h"
#include "util/executor.h"

namespace stagger::server {

namespace tier {
class ObjectStore;
}

struct DataServiceCounters {
  std::atomic<uint64_t> chunks_written{0};
  std::atomic<uint64_t> chunks_deduplicated{0};
  std::atomic<uint64_t> bytes_written{0};   // payload bytes stored
  std::atomic<uint64_t> bytes_received{0};  // put payload bytes taken in
  std::atomic<uint64_t> chunks_read{0};
  std::atomic<uint64_t> bytes_read{0};  // payload bytes sent to readers
  // GetRange replies sent (their bytes count in bytes_read).
  std::atomic<uint64_t> ranges_read{0};
  // Reads that found a record failing its checks (DATA_LOSS).
  std::atomic<uint64_t> verify_failures{0};
  std::atomic<uint64_t> bad_requests{0};
  std::atomic<int64_t> puts_in_flight{0};  // taken in, not yet answered
};

class DataService : public transport::RequestHandler {
 public:
  // None owned; all must outlive the service. `admission` may be nullptr
  // (reads are then not reserved).
  DataService(SegmentStore* segments, MetaStore* meta, Executor* ingest,
              Executor* readers, IngestAdmission* admission = nullptr);
  // Stops the write-behind thread, if any (FinishWriteBehind writes what
  // is left first; without it memory-only chunks are dropped, as a crash
  // would drop them).
  ~DataService() override;

  void OnRequest(transport::Message request,
                 std::unique_ptr<transport::ReplyChannel> reply) override;

  const DataServiceCounters& counters() const { return counters_; }
  const JobCounters& job_counters() const { return job_counters_; }
  // Names this server in errors a client sees (a full disk: which server,
  // how much space is left under `data_dir`). Call before serving.
  void SetIdentity(std::string server_id, std::string data_dir);
  // With an authorizer (not owned; call before serving), a connection must
  // present a data-session key from Hello (DataOp::kAuth) before its puts
  // and gets, and each is checked against the key's grant.
  void SetAuthorizer(Authorizer* auth) { auth_ = auth; }
  // With a rebaser (not owned; call before serving), every delta chunk
  // stored is queued for a rebase once acknowledged, and what a save
  // stores goes to short-lived segments (the next save's rebase replaces
  // it).
  void SetRebaser(Rebaser* rebaser) { rebaser_ = rebaser; }
  // With a cold store (not owned; before serving): a chunk this server's
  // index lacks, or whose stored copy fails its checks, is read from it
  // (server/tier/cold_read.h).
  // Its reads run on a pool of their own (kColdReaders threads): each is a
  // network round trip, which would hold the disk readers.
  void SetColdStore(tier::ObjectStore* cold);
  // With a memory tier (not owned; before serving): puts flagged in_memory
  // are acknowledged once held there, and one thread writes them to the
  // segment store behind, at most kWriteBehindBytes in the store at once,
  // holding back (up to kWriteBehindYield per chunk) while `busy` says
  // client traffic is in the server or a data request came within
  // kRecentRequest: checkpoints and restores go first.
  // GetChunk serves held chunks from memory.
  void SetMemoryTier(MemoryTier* memory, std::function<bool()> busy);
  static constexpr uint64_t kWriteBehindBytes = 32 << 20;
  static constexpr absl::Duration kWriteBehindYield = absl::Milliseconds(50);
  // A data request this recent counts as client traffic for the
  // write-behind (a save's puts come one after another).
  static constexpr absl::Duration kRecentRequest = absl::Milliseconds(5);
  // Whether a data request (a save's put, a restore's get) is being served
  // or was answered within kClientQuiet: what the drain to the cold tier
  // and the rebaser yield to. Admission alone sees a put only while its
  // payload is pulled, not while it is written, nor the gaps between a
  // save's chunks.
  bool ClientTraffic();
  static constexpr absl::Duration kClientQuiet = absl::Milliseconds(50);
  // Writes every memory-only chunk now, waits (up to `timeout`) until they
  // are on disk, then stops the write-behind thread. Call after WaitIdle().
  Status FinishWriteBehind(absl::Duration timeout);
  // The cache of chunks decoded for GetRange: hits, decodes, bytes held.
  DecodedChunks::Stats range_cache_stats() const { return decoded_.stats(); }
  // Bytes of decoded chunks kept for GetRange (DecodedChunks): a reshard's
  // ranks each ask for part of the same chunks.
  static constexpr size_t kRangeCacheBytes = 256 << 20;
  // GetRange reads and decodes on threads of their own, twice the cores (4
  // to 16): decoding is CPU work that would hold the disk readers, and a
  // disk read leaves a core free for another decode.
  static int RangeThreads();

  // The admission's books (queue depth, credit in use, per-client bytes);
  // all zero without an admission.
  AdmissionStats admission_stats() const;

  // From now on every new request is answered UNAVAILABLE ("shutting
  // down"); requests already accepted run to completion.
  void StopAccepting();
  // Blocks until every accepted request has been replied to.
  void WaitIdle();

  // A record copied from another server (the promoter's repair of a
  // degraded step): stored as a put of it would be (an index hit is
  // already here; a delta needs its base stored here; the payload is
  // checked against the header), `done` called once with the outcome.
  void StoreCopy(const std::string& job, const format::RecordHeader& header,
                 transport::Buffer payload, std::function<void(Status)> done);

 private:
  // A put's work off the progress thread: deduplicated, or checked (a
  // delta's base must be stored here) and appended to the segment store.
  void Ingest(std::shared_ptr<transport::ReplyChannel> reply,
              transport::Buffer payload, const format::PutChunkRequest& r);
  // The base a delta put names, once it is found stored (none for a whole
  // chunk); DATA_LOSS for a short payload, FAILED_PRECONDITION when the
  // base is not stored.
  Result<std::optional<format::ChunkId>> StoredBaseOf(
      const format::PutChunkRequest& r, std::string_view payload);
  // The store's answer to an append of `header` (a delta of `base`):
  // indexed and counted as written, or the error (a full disk named as
  // such).
  Status IndexAppended(const std::string& job,
                       const format::RecordHeader& header,
                       const std::optional<format::ChunkId>& base,
                       const Result<ChunkLocation>& loc);
  // The store's answer to an append of put `r`: indexed and acknowledged,
  // or the error (disk full named as such); then queued for the rebaser
  // (a delta, or a whole chunk that names its previous version).
  void Stored(transport::ReplyChannel* reply, const format::PutChunkRequest& r,
              const std::optional<format::ChunkId>& base,
              const Result<ChunkLocation>& loc);
  void HandlePut(transport::Message request,
                 std::unique_ptr<transport::ReplyChannel> reply);
  void HandleGet(transport::Message request,
                 std::unique_ptr<transport::ReplyChannel> reply);
  // GetRange: defined in data_service_range.cc.
  void HandleGetRange(transport::Message request,
                      std::unique_ptr<transport::ReplyChannel> reply);
  // Decodes chunk `r.id` (index entry `meta`), checks it against its id
  // and replies with the range, or with the error (DATA_LOSS marks the
  // copy for repair, as a GetChunk does).
  // Chunk `id`'s decoded bytes, read through the index entry `meta` and
  // checked against the id; DATA_LOSS naming the chunk when they fail.
  Result<transport::Buffer> DecodeWhole(const std::string& job,
                                        const format::ChunkId& id,
                                        const ChunkMeta& meta);
  void ReadRangeAndReply(transport::ReplyChannel* reply,
                         const format::GetRangeRequest& r,
                         const ChunkMeta& meta);
  void HandleAuth(transport::Message request,
                  std::unique_ptr<transport::ReplyChannel> reply);
  // Runs `read` once `bytes` of restore traffic for `peer` are admitted
  // (at once without an admission; else on `on`), then releases them.
  void AdmitRead(uint64_t peer, uint64_t bytes, Executor* on,
                 std::function<void()> read);
  // A read found chunk `id`'s copy bad (`bad`): counts it, marks it for
  // repair and logs it (and that the cold store is read instead, with
  // `reading_cold`).
  void NoteBadCopy(const std::string& job, const format::ChunkId& id,
                   const Status& bad, bool reading_cold);
  // OK when the server is open or connection `peer`'s grant allows `job`.
  Status Allowed(uint64_t peer, const std::string& job);
  // How long what a save stores is expected to live (SetRebaser).
  RecordLifetime SavedLifetime() const {
    return rebaser_ != nullptr ? RecordLifetime::kSaved : RecordLifetime::kLong;
  }
  // Reads the record the index entry `meta` places and sends it.
  // Replies with chunk `r.id` read from the cold store, or its error.
  // Replies with a chunk's record and counts it as read.
  void SendRecord(transport::ReplyChannel* reply, const std::string& job,
                  StoredRecord rec);
  // Reads chunk `r.id` from the cold store (admitted by its size) and
  // replies with it, or with the error; on the cold readers.
  void ServeFromCold(std::shared_ptr<transport::ReplyChannel> reply,
                     uint64_t peer, const format::GetChunkRequest& r);
  void ReplyFromCold(transport::ReplyChannel* reply,
                     const format::GetChunkRequest& r,
                     std::optional<uint64_t> size = std::nullopt);
  void ReadAndReply(transport::ReplyChannel* reply,
                    const format::GetChunkRequest& r, const ChunkMeta& meta);

  // Writes held chunks behind until the tier stops (the write-behind
  // thread).
  void WriteBehindLoop();
  // A data request came within kRecentRequest.
  bool RecentRequest() const;
  // The segment store's answer to a write behind of `rec`.
  void WrittenBehind(const MemoryTier::Record& rec,
                     const Result<ChunkLocation>& loc);
  // A put flagged in_memory: held and acknowledged; false when it did not
  // fit (the caller stores it as a plain put).
  bool HoldInMemory(transport::ReplyChannel* reply, transport::Buffer* payload,
                    const format::PutChunkRequest& r,
                    const std::optional<format::ChunkId>& base);
  // Sends a reply of op `op` carrying status `s` alone.
  static void ReplyStatus(transport::ReplyChannel* reply, format::DataOp op,
                          const Status& s);
  // RESOURCE_EXHAUSTED from the store, said as a full disk of this server.
  Status DiskFull(const Status& s) const;

  // --- Set at construction or by the Set* calls before serving; read only
  // afterwards.
  SegmentStore* segments_;
  MetaStore* meta_;
  Executor* ingest_;
  Executor* readers_;
  IngestAdmission* admission_;
  Authorizer* auth_ = nullptr;
  Rebaser* rebaser_ = nullptr;
  tier::ObjectStore* cold_ = nullptr;
  MemoryTier* memory_ = nullptr;
  // The write-behind's yield to client traffic (SetMemoryTier).
  std::unique_ptr<qos::BackgroundLimiter> write_behind_yield_;
  static constexpr int kColdReaders = 16;
  static constexpr size_t kColdBufferCacheBytes = 128 << 20;

  // --- identity_mu_: what messages name this server by.
  mutable absl::Mutex identity_mu_;
  std::string server_id_ ABSL_GUARDED_BY(identity_mu_) = "this server";
  std::string data_dir_ ABSL_GUARDED_BY(identity_mu_);

  // --- Thread-safe on their own. (The order below is destruction order
  // reversed: the write-behind thread stops before the cold readers go.)
  std::unique_ptr<Executor> cold_readers_;
  // What cold reads land in, recycled: a fresh buffer per chunk faulted in
  // and zeroed every page (a third of the server's CPU in a restore from
  // S3).
  std::shared_ptr<transport::BufferPool> cold_buffers_;

  // --- write_behind_mu_: the bytes held for the write-behind thread.
  absl::Mutex write_behind_mu_;
  uint64_t write_behind_bytes_ ABSL_GUARDED_BY(write_behind_mu_) = 0;
  std::thread write_behind_;

  // --- Thread-safe on their own: atomics, counters, caches.
  std::atomic<int64_t> last_request_ns_{0};  // absl::GetCurrentTimeNanos
  std::atomic<int64_t> last_reply_ns_{0};    // likewise
  DataServiceCounters counters_;
  DecodedChunks decoded_{kRangeCacheBytes};
  JobCounters job_counters_;

  // --- peers_mu_: the grant each authenticated connection presented
  // (bounded: the oldest connections are forgotten past
  // Authorizer::kMaxKeys).
  absl::Mutex peers_mu_;
  std::map<uint64_t, const Grant*> peers_ ABSL_GUARDED_BY(peers_mu_);

  // --- mu_: whether requests are taken, and the requests being served.
  class CountedReply;
  absl::Mutex mu_;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;

  // Last: its threads stop before anything they use goes.
  std::unique_ptr<Executor> range_readers_;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_DATA_SERVICE_H_
