// SegmentStore: per-job append-only segment files of chunk records
// (format/record.h), written by one writer thread with io_uring and read
// back with checksum verification.
//
// Layout: <dir>/<job>/<segment id, 8 digits>.seg. A store never appends to a
// segment that existed when it opened: a crash leaves at most a torn tail in
// an old segment, which readers never reach because the index only points at
// records that were durable. Space is reserved ahead of the appends
// (SegmentStoreOptions::preallocate_bytes), so a segment left by a crash may
// end in zeros; an all-zero record header is the end of a segment's records.
//
// Writes are group-committed: the writer takes every pending append (across
// jobs and clients), issues the writes with several in flight, waits for all
// of them, fdatasyncs each touched segment, and only then runs the callbacks.
//
// Lifetimes: each job appends to one segment per RecordLifetime, so that
// short-lived records (what a save stored, the newest versions the rebaser
// wrote whole) fill small segments of their own that die whole.
//
// Sealed segments: a segment is sealed once no append can reach it and the
// callbacks of every record written to it have run (so whatever a callback
// indexes is indexed). Only sealed segments are listed for compaction or
// removed (server/compactor.h).
//
// Thread-safety: all methods are thread-safe.
#ifndef STAGGER_SERVER_STORAGE_SEGMENT_STORE_H_
#define STAGGER_SERVER_STORAGE_SEGMENT_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/record.h"
#include "metrics/histogram.h"
#include "server/storage/file_system.h"
#include "stagger/status.h"
#include "transport/buffer.h"

namespace stagger::server {

struct ChunkLocation {
  uint64_t segment = 0;      // segment id within the job
  uint64_t offset = 0;       // byte offset of the record, 4 KiB aligned
  uint64_t record_size = 0;  // RecordSize(encoded_length)
};

struct SegmentStoreOptions {
  std::string dir;                      // root of the segment tree
  FileSystem* fs = nullptr;             // not owned; nullptr = default
  uint64_t segment_bytes = 1ull << 30;  // roll to a new segment past this
  // The same for short-lived records (every RecordLifetime but kLong), at
  // most segment_bytes: small, so that the records of one save fill
  // segments of their own, which die whole when they are replaced.
  uint64_t short_lived_segment_bytes = 64ull << 20;
  size_t max_batch_bytes = 64ull << 20;  // bytes per group commit
  size_t queue_depth = 32;               // writes in flight
  // Reserve disk space ahead of the appends to a segment (File::Allocate):
  // an eighth of what the segment holds (at least 64 KiB), at most this many
  // bytes, so that
  // its writes are overwrites the kernel runs in parallel instead of
  // extending writes it serializes. The unused reservation is cut off when
  // the segment is retired or the store closes. 0: never reserve.
  uint64_t preallocate_bytes = 64ull << 20;
};

// How long a record is expected to stay live. Each job appends to one
// segment per lifetime, so records that die together share segments and
// compaction removes those without copying a byte.
enum class RecordLifetime : uint8_t {
  // Live until a gc drops its step: deltas of older versions, compaction's
  // copies (records that already outlived their neighbours).
  kLong = 0,
  // What a save stored, which a rebase replaces: a delta at once, a whole
  // version at the next save (server/rebaser.h).
  kSaved = 1,
  // A newest version the rebaser wrote whole, which the next save's
  // rebase replaces.
  kRebased = 2,
};
inline constexpr size_t kRecordLifetimes = 3;

struct SegmentInfo {
  uint64_t id = 0;
  uint64_t size = 0;   // bytes in the file (reserved space included)
  bool sealed = true;  // false: a segment being appended to
  // Of a segment being appended to: the records it takes.
  RecordLifetime lifetime = RecordLifetime::kLong;
  // A lower bound on the bytes its records take: `size` for a sealed
  // segment; for the open one, `size` less the most its reservation ahead
  // of appends can be.
  uint64_t records_at_least = 0;
};

struct StoredRecord {
  format::RecordHeader header;
  transport::Buffer payload;  // exactly header.encoded_length bytes
};

using AppendCallback = std::function<void(Result<ChunkLocation>)>;

struct AppendOptions {
  // h.encoded_length / payload_crc32c were checked against the payload by
  // the caller (the memory tier did when it took the chunk in).
  bool payload_checked = false;
  RecordLifetime lifetime = RecordLifetime::kLong;
};

// What the writer has done since the store opened (for the metrics page).
struct SegmentStoreStats {
  uint64_t records_written = 0;  // acknowledged records
  uint64_t bytes_written = 0;    // their record bytes (header + padding too)
  uint64_t batches = 0;          // group commits, failed ones included
  uint64_t failed_batches = 0;
  size_t queued = 0;          // appends waiting for the writer now
  uint64_t io_in_flight = 0;  // file system requests in flight now
  metrics::Histogram::Snapshot write_seconds;  // per batch: all its writes
  metrics::Histogram::Snapshot sync_seconds;   // per fdatasync
};

class SegmentStore {
 public:
  // Creates `dir` if needed and starts the writer thread.
  static Result<std::unique_ptr<SegmentStore>> Open(
      const SegmentStoreOptions& options);
  // Finishes every queued append (callbacks run) and stops the writer.
  ~SegmentStore();

  // Queues a record for `job` (validated name). `done` runs on the writer
  // thread once the record is durable (location) or failed (status: e.g.
  // RESOURCE_EXHAUSTED on a full disk, naming the segment path).
  // h.encoded_length / payload_crc32c are checked against `payload`,
  // unless options.payload_checked. The store owns `payload` from here on.
  void Append(const std::string& job, const format::RecordHeader& h,
              transport::Buffer payload, AppendCallback done,
              const AppendOptions& options = {});

  // Reads the record at `loc` and verifies it (header, payload checksum,
  // padding). DATA_LOSS naming the segment and offset on any corruption,
  // NOT_FOUND if the segment does not exist. `io` carries the priority
  // (compaction reads at kLow).
  Result<StoredRecord> Read(const std::string& job, const ChunkLocation& loc,
                            const IOOptions& io = {});

  // Visits every intact record of `job` in segment order; stops at the
  // first torn or corrupt record of each segment (reported to `on_error`)
  // and, silently, at reserved space that was never written.
  Status Scan(const std::string& job,
              const std::function<void(const format::RecordHeader&,
                                       const ChunkLocation&)>& on_record,
              const std::function<void(const Status&)>& on_error);

  // The sealed segments of `job` (see above) with their file sizes,
  // ascending by id; empty when the job has no segments. Never lists the
  // segment being appended to, nor one whose records' callbacks are still
  // to run. Reflects every append whose callback ran before the call (it
  // waits for the batch being committed, if any). Must not be called from
  // an append callback.
  Result<std::vector<SegmentInfo>> ListSealedSegments(const std::string& job);
  // As ListSealedSegments, with the segment being appended to as well
  // (sealed = false), and any still being committed.
  Result<std::vector<SegmentInfo>> ListSegments(const std::string& job);

  // Retires the segments `job` is appending to (one per lifetime), once the
  // batch being committed is done: their unused reservation is cut off,
  // they are sealed, and the next append opens a new segment. So a mostly dead
  // segment can be compacted before it fills up (server/compactor.h). Returns
  // once done; OK when the job has no open segment.
  Status Roll(const std::string& job);
  // The same for the segment of one lifetime only.
  Status Roll(const std::string& job, RecordLifetime lifetime);
  // Asks for that segment to be retired before the next batch is placed,
  // if it holds `min_bytes` or more by then; returns at once.
  void RequestRoll(const std::string& job, RecordLifetime lifetime,
                   uint64_t min_bytes);

  // Deletes sealed segment `id` of `job` and syncs the job directory.
  // FAILED_PRECONDITION when the segment is not sealed, NOT_FOUND when it
  // does not exist. A Read that already opened the file completes; later
  // Reads of it get NOT_FOUND.
  Status RemoveSegment(const std::string& job, uint64_t id);

  // Whether segment `id` of `job` holds short-lived records (any
  // RecordLifetime but kLong). Which lifetime a segment took is not
  // written down: for one of an earlier run this says whether it is no
  // larger than short_lived_segment_bytes (a long-lived segment that small
  // is one a job left early; taking it for short-lived costs a copy).
  bool ShortLived(const std::string& job, uint64_t id);

  // True when segments are written with O_DIRECT (false after a fallback).
  bool direct_io() const;
  // The file system segments are written through (the options' or the
  // default one the store made); the server writes its other files of the
  // data directory through it too.
  FileSystem* file_system() const;

  SegmentStoreStats Stats() const;

 private:
  class Impl;
  explicit SegmentStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_STORAGE_SEGMENT_STORE_H_
