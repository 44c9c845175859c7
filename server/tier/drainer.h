// Drainer: copies every complete step of every job from the server's disk
// to the cold store (docs/design.md §10, issue: the durable tier), in the
// background, oldest step first.
//
// A step goes in three phases: its chunks (each delta's base before the
// delta; each written as a new object, never over one that is there; one
// written before this run started is looked for first, a stat instead of
// its bytes; one known from this run costs nothing), then its ranks'
// manifests, then its StepInfo object, last, so the store holds a step
// only when all of it is there.
// The step is then marked drained in the MetaStore (synced); after a
// restart the drain resumes with the first step not marked.
//
// Low priority: before each chunk the drain waits while `busy()` says the
// server has client traffic (pulls of new checkpoints, restore reads), and
// it keeps to `bytes_per_s` when set. Chunks of a step go out over
// `parallel` threads (one RADOS operation each; the cluster is latency
// bound per operation).
//
// Faults: a store that cannot be reached fails the pass; the drain waits
// (min_backoff_ms, doubling to max_backoff_ms) and tries again, and its
// stats say how far behind it is.
//
// Several servers: a server that holds chunks of a job but none of its
// steps (their coordinator is another server) drains every chunk it
// indexes of it; a coordinator's step whose chunk it does not hold waits
// until a later pass finds that chunk in the store.
//
// Rebased deltas (server/rebaser.h) can make a chunk a delta of a newer one
// after the older one was drained as a delta of it; the drain never writes
// such a cycle: a chunk whose base chain leads back to itself is stored
// decoded, as a raw record.
//
// Thread-safety: thread-safe.
#ifndef STAGGER_SERVER_TIER_DRAINER_H_
#define STAGGER_SERVER_TIER_DRAINER_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "qos/rate_limiter.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"
#include "server/tier/cold_read.h"
#include "server/tier/object_store.h"

namespace stagger::server::tier {

struct DrainerOptions {
  uint64_t bytes_per_s = 0;  // 0: no cap
  int parallel = 16;         // chunk writes at once
  int64_t min_backoff_ms = 500;
  int64_t max_backoff_ms = 30000;
  // How often the drain looks for new steps without being told.
  int64_t poll_ms = 2000;
  // How often it lists the store for steps other servers stored there and
  // imports those this server lacks (Import; 0: only when called).
  int64_t import_ms = 30000;
  // Retention in the store (cold_gc.h): after a pass that drained steps of
  // a job, keep its newest `keep` steps there (0: all), sparing unneeded
  // chunks written in the last `grace_s` seconds.
  uint32_t keep = 0;
  int64_t grace_s = 600;
  // Whether client traffic is in the server now; the drain waits while it
  // is. nullptr: never.
  std::function<bool()> busy;
};

struct DrainerStats {
  uint64_t steps_drained = 0;   // by this run
  uint64_t chunks_written = 0;  // objects written
  uint64_t bytes_written = 0;   // their bytes
  uint64_t chunks_present = 0;  // found in the store already (a stat)
  uint64_t raw_fallbacks = 0;   // chunks stored decoded (see above)
  uint64_t failed_passes = 0;
  // Complete steps of all jobs not in the store yet, as of the last pass,
  // and the oldest one's completion time (Unix ms; 0: none behind).
  uint64_t steps_behind = 0;
  int64_t oldest_behind_unix_ms = 0;
  // The last pass's error, and when (Unix ms); empty after a good pass.
  std::string last_error;
  int64_t last_error_unix_ms = 0;
  double busy_wait_s = 0;  // time waited for client traffic
  // Retention in the store (DrainerOptions::keep) since start.
  uint64_t gc_steps_deleted = 0;
  uint64_t gc_chunks_deleted = 0;
  uint64_t gc_bytes_freed = 0;
  // Steps this server held only in the store (imported at start) that
  // were deleted there, by any server's retention, and so forgotten here.
  uint64_t cold_steps_forgotten = 0;
  // Steps imported from the store (Import: at start and every import_ms).
  uint64_t cold_steps_imported = 0;
};

class Drainer {
 public:
  // None owned; all must outlive the drainer.
  Drainer(MetaStore* meta, SegmentStore* segments, ObjectStore* store,
          DrainerOptions options);
  ~Drainer();  // Stop()
  Drainer(const Drainer&) = delete;
  Drainer& operator=(const Drainer&) = delete;

  void Start();
  // Finishes the chunk writes in flight and stops; idempotent.
  void Stop();
  // A step completed: look now rather than at the next poll.
  void Notify();

  // One pass over every job (what the thread runs): drains every complete
  // step it can; the first error.
  Status DrainOnce();
  // Blocks until a pass ends with nothing behind, or `timeout` (tests).
  bool WaitDrained(absl::Duration timeout);

  // Imports the steps the store holds and this server does not
  // (cold_read.h ImportColdSteps): what the server runs at start, and the
  // drain's thread every import_ms, so that steps other servers drained
  // are served without a restart. A step left out once is not read again.
  Result<ImportStats> Import();

  // Held by a deletion (rm, gc) from the disk's delete to the store's: no
  // step it deletes is imported back between the two.
  class DeletionScope {
   public:
    // `drainer` may be nullptr (no cold tier).
    explicit DeletionScope(Drainer* drainer);
    ~DeletionScope();
    DeletionScope(const DeletionScope&) = delete;
    DeletionScope& operator=(const DeletionScope&) = delete;

   private:
    Drainer* const drainer_;
  };

  DrainerStats stats() const;
  ObjectStore* store() const { return store_; }

 private:
  struct ChunkKey {
    std::string job;
    format::ChunkId id;
    template <typename H>
    friend H AbslHashValue(H h, const ChunkKey& k) {
      return H::combine(std::move(h), k.job, k.id);
    }
    bool operator==(const ChunkKey& o) const {
      return job == o.job && id == o.id;
    }
  };

  // What one pass found: its first error, the steps left behind and the
  // oldest one's completion time.
  struct Pass {
    Status first;
    uint64_t behind = 0;
    int64_t oldest = 0;
    void Note(const Status& s) {
      if (first.ok() && !s.ok()) first = s;
    }
  };

  void Loop();
  // Import, when import_ms passed since the last one; logs what it found.
  void ImportIfDue();
  // Drains what the pass can of `job` (its steps, or, for a job this
  // server coordinates no step of, its chunks).
  void DrainJob(const std::string& job, Pass* pass);
  // Publishes the pass in the stats and logs a change of state.
  void EndPass(const Pass& pass);
  // Applies DrainerOptions::keep to `job` in the store; logs what it did.
  Status CollectCold(const std::string& job);
  // Forgets the steps of `job` this server holds only in the store whose
  // step object is gone from it (another server's retention, say).
  Status ForgetStepsGoneFromStore(const std::string& job);
  // Drains every chunk this server indexes of `job`, a job it holds no
  // step of (its coordinator is another server).
  Status DrainChunksOf(const std::string& job);
  // Drains `chunks` over `parallel` threads; with `skip_missing`, a chunk
  // on no tier this server reaches is passed over.
  Status DrainChunks(const std::string& job,
                     const std::vector<format::ChunkId>& chunks,
                     bool skip_missing);
  // Drains one step; FAILED_PRECONDITION when a chunk is on no reachable
  // tier yet (another server's).
  Status DrainStep(const std::string& job, const pb::StepInfo& info);
  // Writes chunk `id` (bases first); `chain` holds the deltas on the way
  // to it.
  Status DrainChunk(const std::string& job, const format::ChunkId& id,
                    std::vector<format::ChunkId>* chain);
  // For a chunk this server does not index: OK once the store holds it,
  // FAILED_PRECONDITION until then.
  Status RequireInStore(const std::string& job, const format::ChunkId& id);
  // Chunk `id` decoded, as a raw record (for a chunk whose base chain
  // leads back to it).
  Result<std::string> DecodedRecord(const std::string& job,
                                    const format::ChunkId& id,
                                    const ChunkMeta& meta);
  Status Put(const ObjectName& o, std::string_view bytes);
  Result<bool> PutNew(const ObjectName& o, std::string_view bytes);
  // Waits for client traffic to pass and for the rate cap.
  void Pace(size_t bytes);
  bool Known(const std::string& job, const format::ChunkId& id);
  void SetKnown(const std::string& job, const format::ChunkId& id);

  MetaStore* const meta_;
  SegmentStore* const segments_;
  ObjectStore* const store_;
  const DrainerOptions options_;
  const int64_t started_unix_ms_;
  // bytes_per_s (no burst), after waiting while `busy` says so.
  qos::BackgroundLimiter limiter_;

  // Held shared by a DeletionScope, try-locked by an import.
  absl::Mutex deletion_mu_;
  absl::Mutex import_mu_;  // one Import at a time
  std::set<std::pair<std::string, int64_t>> refused_
      ABSL_GUARDED_BY(import_mu_);
  int64_t last_import_unix_ms_ ABSL_GUARDED_BY(import_mu_) = 0;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
  bool caught_up_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t passes_ ABSL_GUARDED_BY(mu_) = 0;
  DrainerStats stats_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<ChunkKey> known_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_DRAINER_H_
