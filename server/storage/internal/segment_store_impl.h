// The segment store's implementation class, shared by segment_store.cc
// (appends, the writer, sealing) and segment_store_read.cc (reads and
// scans). Internal to server/storage.
#ifndef STAGGER_SERVER_STORAGE_INTERNAL_SEGMENT_STORE_IMPL_H_
#define STAGGER_SERVER_STORAGE_INTERNAL_SEGMENT_STORE_IMPL_H_

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "metrics/histogram.h"
#include "server/storage/segment_store.h"

namespace stagger::storage_internal {

// Staging buffers are written one per request: 1 MiB writes keep the
// device busy without pinning much memory per request in flight.
inline constexpr size_t kStagingBytes = 1 << 20;
inline constexpr uint64_t kFirstSegmentId = 1;  // segment 0 never exists

inline std::string Where(const std::string& job, uint64_t segment,
                         uint64_t offset) {
  return absl::StrCat("job ", job, " segment ", segment, " offset ", offset);
}

}  // namespace stagger::storage_internal

namespace stagger::server {

class SegmentStore::Impl {
 public:
  Impl(const SegmentStoreOptions& options, std::unique_ptr<FileSystem> owned)
      : options_(options),
        owned_fs_(std::move(owned)),
        fs_(options.fs != nullptr ? options.fs : owned_fs_.get()) {
    size_t count =
        (options_.max_batch_bytes + storage_internal::kStagingBytes - 1) /
        storage_internal::kStagingBytes;
    count = std::clamp<size_t>(count, 1, options_.queue_depth);
    for (size_t i = 0; i < count; ++i)
      staging_.emplace_back(storage_internal::kStagingBytes);
    writer_ = std::thread([this] { WriterLoop(); });
  }

  ~Impl() {
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    writer_.join();
  }

  void Append(const std::string& job, const format::RecordHeader& h,
              transport::Buffer payload, AppendCallback done,
              const AppendOptions& options);
  Result<StoredRecord> Read(const std::string& job, const ChunkLocation& loc,
                            const IOOptions& io);
  Status Scan(const std::string& job,
              const std::function<void(const format::RecordHeader&,
                                       const ChunkLocation&)>& on_record,
              const std::function<void(const Status&)>& on_error);
  Result<std::vector<SegmentInfo>> ListSealedSegments(const std::string& job);
  Result<std::vector<SegmentInfo>> ListSegments(const std::string& job,
                                                bool sealed_only);
  // Retires the job's segments of the lifetimes in `mask` (bit 1 << each)
  // that hold `min_bytes` or more; waits for it unless `!wait`.
  Status Roll(const std::string& job, uint8_t mask, uint64_t min_bytes,
              bool wait);
  Status RemoveSegment(const std::string& job, uint64_t id);
  bool ShortLived(const std::string& job, uint64_t id);
  bool direct_io() const { return direct_.load(std::memory_order_relaxed); }
  FileSystem* fs() const { return fs_; }
  SegmentStoreStats Stats() const;

 private:
  struct Pending {
    std::string job;
    format::RecordHeader header;
    transport::Buffer payload;
    AppendCallback done;
    Status rejected;  // set when Append refused the record
    uint64_t record_size = 0;
    RecordLifetime lifetime = RecordLifetime::kLong;
  };
  struct Segment {
    uint64_t id = 0;
    std::string path;
    std::unique_ptr<File> file;
    uint64_t size = 0;       // bytes placed, written or not
    uint64_t durable = 0;    // bytes synced and acknowledged
    uint64_t allocated = 0;  // file size reserved by Allocate
    uint64_t limit = 0;      // rolled past this many bytes
  };
  struct JobState {
    uint64_t next_id = storage_internal::kFirstSegmentId;
    bool dir_exists = false;
    // The job directory's entry in the root has been fsynced by this
    // process. Until then every commit for the job syncs the root too.
    bool dir_durable = false;
    // The segment being appended to, per RecordLifetime.
    std::array<std::unique_ptr<Segment>, kRecordLifetimes> current;
  };
  // A record's place in the batch being committed.
  struct Placement {
    Pending* item;
    Segment* segment;
    uint64_t offset;
  };
  // One staging buffer's worth of a segment's bytes.
  struct Piece {
    Segment* segment;
    uint64_t offset;
    const char* data;
    size_t len;
  };

  std::string JobDir(const std::string& job) const {
    return JoinPath(options_.dir, job);
  }

  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || !roll_.empty() || stopping_;
  }
  // Retires the current segment of each job in `jobs` (writer thread).
  struct RollRequest {
    uint8_t mask = 0;  // bit 1 << lifetime
    uint64_t min_bytes = UINT64_MAX;
  };
  void RollJobs(const std::map<std::string, RollRequest>& jobs);
  void WriterLoop();
  void Commit(std::vector<Pending>& batch);
  // What one batch touches on its way to disk (Commit's steps).
  struct Batch {
    std::vector<Placement> placements;
    std::vector<Segment*> touched;
    std::vector<std::unique_ptr<Segment>> retired;
    std::set<std::string> dirs_to_sync;
  };
  // Gives every record not rejected its place in a segment.
  Status Place(std::vector<Pending>& batch, Batch* b);
  // Writes the batch's segments and fdatasyncs them, timed.
  Status WriteAndSync(const Batch& b);
  // After the batch: its segments durable up to what it wrote, or (on
  // `error`) abandoned, so no acknowledged record follows a torn one.
  void Settle(const Status& error, Batch& b);
  // Answers every record of the batch: its location, or why not.
  static void Answer(std::vector<Pending>& batch, const Batch& b,
                     const Status& error);
  Result<JobState*> GetJob(const std::string& job);
  Result<Segment*> SegmentFor(const std::string& job, RecordLifetime lifetime,
                              uint64_t record_size,
                              std::vector<std::unique_ptr<Segment>>* retired,
                              std::set<std::string>* dirs_to_sync);
  Status WriteSegments(const std::vector<Segment*>& touched,
                       const std::vector<Placement>& placements);
  Status FlushPieces(std::vector<Piece>* pieces);
  // When `p`'s payload was received with room for the record header in
  // front (transport::Buffer::WithHeadroom) and for the padding behind,
  // lays the record out in place (header and zero padding written around
  // the payload) and returns its start; otherwise nullptr (the record is
  // copied into staging buffers).
  char* InPlaceRecord(Pending& p);
  void Abandon(Segment* segment);
  // Reserves space for `segment`'s placed bytes and an eighth more (at
  // least 64 KiB), up to options_.preallocate_bytes more (not beyond the
  // segment limit unless a record needs it). Failures only cost speed: writes
  // extend the file instead.
  void Reserve(Segment* segment);
  // Cuts a segment's unused reservation off (best effort).
  void Trim(Segment* segment);
  // Marks segment `id` of `job` unsealed; called before its file exists.
  void Unseal(const std::string& job, uint64_t id, RecordLifetime lifetime);
  // After a batch's callbacks ran: only each job's current segments stay
  // unsealed.
  void Reseal();
  // The segments of `job` that may still change, with what they take.
  std::map<uint64_t, RecordLifetime> Unsealed(const std::string& job);
  Result<std::unique_ptr<File>> OpenForRead(const std::string& job,
                                            uint64_t segment);
  // Reads and verifies the record at `offset` of an open segment; `size` is
  // the file's size. DATA_LOSS for a torn or corrupt record, OUT_OF_RANGE
  // when the header is all zeros (reserved space, never written).
  Result<format::RecordHeader> ReadRecordAt(File* file, uint64_t size,
                                            uint64_t offset,
                                            transport::Buffer* out);

  const SegmentStoreOptions options_;
  const std::unique_ptr<FileSystem> owned_fs_;
  FileSystem* const fs_;
  std::atomic<bool> direct_{true};
  // Cleared when the file system has no way to reserve space.
  bool preallocate_ = true;

  // Stats() counters, written by the writer thread.
  std::atomic<uint64_t> records_written_{0};
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> failed_batches_{0};
  metrics::Histogram write_seconds_;
  metrics::Histogram sync_seconds_;

  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Batches taken from the queue / fully committed (callbacks run, seals
  // updated).
  uint64_t batches_started_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_done_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs whose current segment Roll() asked to retire, and how many Roll()
  // calls were made / are done.
  std::map<std::string, RollRequest> roll_ ABSL_GUARDED_BY(mu_);
  uint64_t rolls_asked_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rolls_done_ ABSL_GUARDED_BY(mu_) = 0;

  // Per job that has unsealed segments, their ids. Written by the writer
  // thread, read by ListSegments and RemoveSegment.
  absl::Mutex seal_mu_;
  std::map<std::string, std::map<uint64_t, RecordLifetime>> unsealed_
      ABSL_GUARDED_BY(seal_mu_);
  // Per job, the segments this store opened and has not removed, with the
  // lifetime each took.
  std::map<std::string, std::map<uint64_t, RecordLifetime>> opened_
      ABSL_GUARDED_BY(seal_mu_);

  // Writer thread only.
  std::map<std::string, JobState> jobs_;
  std::vector<transport::Buffer> staging_;
  std::thread writer_;  // last: starts after everything above exists
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_STORAGE_INTERNAL_SEGMENT_STORE_IMPL_H_
