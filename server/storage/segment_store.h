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
  std::string dir;                       // root of the segment tree
  FileSystem* fs = nullptr;              // not owned; nullptr = default
  uint64_t segment_bytes = 1ull << 30;   // roll to a new segment past this
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

struct SegmentInfo {
  uint64_t id = 0;
  uint64_t size = 0;   // bytes in the file (reserved space included)
  bool sealed = true;  // false: the segment being appended to
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
  // unless the caller did (`payload_checked`: the memory tier checked it
  // when it took the chunk in). The store owns `payload` from here on.
  void Append(const std::string& job, const format::RecordHeader& h,
              transport::Buffer payload, AppendCallback done,
              bool payload_checked = false);

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

  // Retires the segment `job` is appending to, once the batch being
  // committed is done: its unused reservation is cut off, it is sealed, and
  // the next append opens a new segment. So a mostly dead segment can be
  // compacted before it fills up (server/compactor.h). Returns once done;
  // OK when the job has no open segment.
  Status Roll(const std::string& job);

  // Deletes sealed segment `id` of `job` and syncs the job directory.
  // FAILED_PRECONDITION when the segment is not sealed, NOT_FOUND when it
  // does not exist. A Read that already opened the file completes; later
  // Reads of it get NOT_FOUND.
  Status RemoveSegment(const std::string& job, uint64_t id);

  // True when segments are written with O_DIRECT (false after a fallback).
  bool direct_io() const;

  SegmentStoreStats Stats() const;

 private:
  class Impl;
  explicit SegmentStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_STORAGE_SEGMENT_STORE_H_
