// Compactor: reclaims the segment space of chunks that Gc and Sweep dropped
// from the index, by rewriting the live records of mostly dead segments and
// deleting the segments.
//
// One pass over a job:
//   1. retire the job's open short-lived segments (min_roll_bytes or more:
//      they die whole once what they hold is replaced); list the job's
//      segments and scan the job's index for the live bytes of each; when
//      a segment being appended to (min_roll_bytes or more, or nothing
//      live) is below `threshold`, roll it over (SegmentStore::Roll) so it
//      is sealed;
//   2. list the sealed segments (SegmentStore::ListSealedSegments: never
//      the segment being appended to);
//   3. for each segment whose live bytes are below `threshold` of its size
//      (and, while the job's segments hold more than `max_space_amp` times
//      its live bytes, the next emptiest ones: see below),
//      read every record the index still places there, append a copy
//      through SegmentStore::Append (group-committed, fdatasynced), and once
//      a batch of copies is durable point the index at them
//      (MetaStore::RelocateChunks: only entries still at the old place,
//      one synced write);
//   4. scan the index again and remove each such segment it no longer
//      names.
// A reclaim pass (ScheduleReclaim) does step 4 alone, for the sealed
// segments the index names nothing in: cheap enough to run while a save's
// rebases are killing a short-lived segment after another.
//
// A writer that appends records and indexes them after their callbacks
// (the rebaser) holds removals off meanwhile (HoldRemovals): otherwise a
// pass could find the record's segment unnamed and remove it just before
// the index names it.
//
// A crash at any step leaves every index entry pointing at durable bytes:
// a copy is durable before the index names it, and the index stops naming
// a segment (synced) before the segment is removed. What a crash leaves
// behind (unindexed copies, segments with nothing live) a later pass
// reclaims.
//
// Readers that looked a chunk up before it moved find its old segment gone
// (NOT_FOUND) and look it up again: ReadChunk (server/chunk_read.h).
//
// Threads: one background thread runs the scheduled passes in order,
// copying at most `bytes_per_s` and reading at IOPriority::kLow. CompactJob
// runs a pass on the caller's thread. Passes never overlap. All methods
// are thread-safe.
#ifndef STAGGER_SERVER_COMPACTOR_H_
#define STAGGER_SERVER_COMPACTOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "qos/rate_limiter.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"
#include "stagger/status.h"

namespace stagger::server {

// Where a pass stands when CompactorOptions::on_step runs.
enum class CompactionStep {
  kCopied,   // a batch of copies is durable; the index names the old place
  kIndexed,  // the index no longer names the segment; it is not removed yet
};

struct CompactorOptions {
  // A sealed segment is compacted when its live bytes are below this
  // fraction of its size. In (0, 1].
  double threshold = 0.5;
  // A bound on the job's space amplification: when its segments hold more
  // than this many times its live bytes, a pass also compacts the segments
  // with the lowest live fraction (below kMaxLiveFraction each, the open
  // one rolled over when picked) until the dead bytes left are at most half
  // of what the bound allows. So segments that each stay more than
  // `threshold` live (a job whose rebased deltas and whole versions die a
  // few at a time) do not pile up dead bytes. 0: no bound; else >= 1.
  double max_space_amp = 1.2;
  uint64_t bytes_per_s = 64ull << 20;  // copy rate; 0: unlimited
  uint64_t batch_bytes = 64ull << 20;  // copied per index update; > 0
  // The segment being appended to is rolled over for compaction only from
  // this size on, so a small job keeps one segment instead of making a new
  // one at every pass.
  uint64_t min_roll_bytes = 1ull << 20;
  // Tests: runs at each step with the segment's id; a non-OK status ends
  // the pass right there, as if the process had died.
  std::function<Status(CompactionStep, uint64_t segment)> on_step;
};

struct CompactionStats {
  uint64_t segments_rolled = 0;  // open segments retired to be compacted
  uint64_t segments_removed = 0;
  uint64_t records_copied = 0;
  uint64_t bytes_copied = 0;     // record bytes written again
  uint64_t bytes_reclaimed = 0;  // segment file bytes deleted
};

// The outcome of one scheduled pass.
class CompactionTicket {
 public:
  // The pass's stats or error once it has run; DEADLINE_EXCEEDED when it
  // has not finished by `deadline`; UNAVAILABLE when the compactor stopped
  // first.
  Result<CompactionStats> Wait(absl::Time deadline) const;

 private:
  friend class Compactor;
  void Finish(Result<CompactionStats> result);
  absl::Notification done_;
  Result<CompactionStats> result_ = absl::UnknownError("pass not run");
};

class Compactor {
 public:
  // Segments more live than this are never compacted for space alone:
  // copying 9 bytes to reclaim 1 costs more disk time than it gives.
  static constexpr double kMaxLiveFraction = 0.9;

  // Neither store is owned; both must outlive the compactor. Starts the
  // background thread. INVALID_ARGUMENT for a threshold outside (0, 1] or a
  // zero batch size.
  static Result<std::unique_ptr<Compactor>> Create(SegmentStore* segments,
                                                   MetaStore* meta,
                                                   CompactorOptions options);
  // Stop().
  ~Compactor();

  // Queues a pass over `job` for the background thread. A pass already
  // queued (not started) for the job is shared. Logs one line per pass
  // that removed segments or failed.
  std::shared_ptr<const CompactionTicket> Schedule(const std::string& job);

  // A step of `job` is complete: what its saves stored is retired from
  // the short-lived segment (from min_roll_bytes on), so that the next
  // save's records go to segments of their own. Returns at once.
  void StepComplete(const std::string& job) {
    segments_->RequestRoll(job, RecordLifetime::kSaved,
                           options_.min_roll_bytes);
  }

  // Queues a reclaim pass over `job`: the sealed segments the index names
  // nothing in are removed, nothing is copied. Shares a pass already queued
  // for the job (of either kind).
  std::shared_ptr<const CompactionTicket> ScheduleReclaim(
      const std::string& job);

  // While one lives, no pass removes a segment (see above). Cheap: a
  // shared lock that passes take exclusively only to pick and remove.
  class RemovalHold {
   public:
    explicit RemovalHold(absl::Mutex* mu) : mu_(mu) {
      if (mu_ != nullptr) mu_->ReaderLock();
    }
    RemovalHold(RemovalHold&& o) : mu_(std::exchange(o.mu_, nullptr)) {}
    RemovalHold& operator=(RemovalHold&&) = delete;
    ~RemovalHold() {
      if (mu_ != nullptr) mu_->ReaderUnlock();
    }

   private:
    absl::Mutex* mu_;
  };
  RemovalHold HoldRemovals() { return RemovalHold(&removal_mu_); }

  // Runs one pass over `job` now, on this thread. The error of the first
  // step that failed (with the job and segment), CANCELLED when Stop()
  // interrupted it. Work done before an error stays valid.
  Result<CompactionStats> CompactJob(const std::string& job,
                                     bool reclaim_only = false);

  // Interrupts the running pass at its next record, fails queued passes
  // with UNAVAILABLE and joins the thread. Idempotent.
  void Stop();

 private:
  Compactor(SegmentStore* segments, MetaStore* meta, CompactorOptions options);
  class Pass;
  void Run();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || stopping_;
  }
  SegmentStore* const segments_;
  MetaStore* const meta_;
  const CompactorOptions options_;
  // The copy rate: bytes_per_s, no burst (time spent elsewhere in a pass is
  // not made up for); cancelled by Stop().
  qos::BackgroundLimiter limiter_;

  // Queues a pass over `job` or shares the one queued (made a full pass
  // unless `reclaim_only`).
  std::shared_ptr<const CompactionTicket> Queue(const std::string& job,
                                                bool reclaim_only);

  absl::Mutex pass_mu_;  // held for a whole pass
  // Shared by RemovalHolds; a pass holds it exclusively from its last index
  // scan to the removals.
  absl::Mutex removal_mu_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  struct Queued {
    std::string job;
    std::shared_ptr<CompactionTicket> ticket;
    bool reclaim_only = false;
  };
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_COMPACTOR_H_
