// Rebaser: keeps the newest version of every chunk slot whole on disk and
// turns the older ones into deltas against their successors ("reverse
// deltas"), in the background, after the client's put was acknowledged.
//
// A client sends a changed chunk Y as a delta against its previous version
// B. Left as it came, every save adds a link to a forward chain (B <- Y <-
// Z ...): the newest step, the one restored after a failure, decodes the
// whole chain, and a gc of the old steps frees nothing while a kept step's
// chain runs through them. So the client would have to cut chains with a
// whole chunk every few saves, and a sparse update would cost a whole
// chunk every few steps on disk.
//
// Instead, for each delta put, the rebaser
//   1. decodes Y (from B, itself decoded through its chain if it is not
//      whole) and writes Y whole, in the codec B's whole version used;
//   2. when B is whole, writes B as a delta against Y (the XOR payload is
//      its own inverse; a numeric delta is encoded anew) — unless B is to
//      stay whole as a keyframe (below) or the delta would not be smaller;
//   3. points the index at the new records in one synced batch, only if
//      neither entry changed meanwhile (a gc, a relocation, a repair);
//      otherwise the new records are left dead for compaction to reclaim.
// The disk then holds one whole version per slot plus one delta per save:
// a save adds about its changed bytes, the newest step reads whole, and a
// gc of the oldest steps frees their deltas at once.
//
// A whole put that names its previous version (a client whose encoder
// could not keep up sends raw) gets step 2 alone (RebaseWhole), so its
// save too adds about a delta, not a whole version.
//
// Keyframes: B stays whole when the deltas leading to it would exceed
// max_behind_hops links or max_behind_ratio x its raw length in bytes, so
// loading an old step reads at most that many deltas past a whole chunk.
//
// Every record is written durable before the index points at it, and the
// old ones stay until compaction proves them dead, so a crash at any point
// leaves an index of valid records. A chunk not rebased (the queue was
// full, the server stopped more than 5 s before it was done) stays a
// forward delta, which loads; the next save's rebase writes it whole.
//
// Thread-safety: all methods are thread-safe. One thread, at a lower
// scheduling priority than the rest of the server.
#ifndef STAGGER_SERVER_REBASER_H_
#define STAGGER_SERVER_REBASER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "format/chunk_id.h"
#include "format/codec.h"
#include "qos/rate_limiter.h"
#include "server/compactor.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"

namespace stagger::server {

struct RebaserOptions {
  uint32_t max_behind_hops = 64;
  double max_behind_ratio = 4;
  size_t max_queue = 1 << 16;  // rebases waiting; more are dropped
  int zstd_level = 1;
  // Each rebase first waits, up to this long, while the client traffic
  // predicate (SetClientTraffic) says a save or restore is being served.
  absl::Duration max_yield = absl::Seconds(2);
  // With a compactor: each time the whole versions a job's rebases left
  // dead add up to this many bytes, and when the job has no more rebases
  // queued, a reclaim pass removes the short-lived segments they emptied
  // (SegmentStoreOptions::short_lived_segment_bytes), so the disk does not
  // first hold a whole save's old versions beside their deltas.
  uint64_t reclaim_every_bytes = 16ull << 20;
};

struct RebaserStats {
  uint64_t rebased = 0;  // chunks now whole with their base a delta of them
  // ... written whole, their base left as it was: a keyframe, a base that
  // is not whole, or one no smaller as a delta.
  uint64_t keyframes = 0;
  uint64_t aborted = 0;  // an entry changed meanwhile; left as it came
  uint64_t failed = 0;   // a read or write failed; left as it came
  uint64_t dropped = 0;  // the queue was full
  // Bases left as they were (keyframes, no smaller as a delta) copied out
  // of a short-lived segment (Keep).
  uint64_t moved = 0;
  uint64_t bytes_written = 0;  // record payload bytes
  size_t queued = 0;
};

// Decodes chunk `id` of `job` (`meta`: its index entry) into `out`
// (meta.raw_length bytes), following its delta bases, at most `max_depth`
// links. `whole_codec` (optional) gets the codec of the whole chunk the
// chain ends in. DATA_LOSS for a corrupt record, a chain too deep or a
// result that does not hash to `id`.
Status DecodeStoredChunk(MetaStore* meta, SegmentStore* segments,
                         const std::string& job, const format::ChunkId& id,
                         const ChunkMeta& chunk, char* out,
                         format::Codec* whole_codec = nullptr,
                         int max_depth = 4096);

class Rebaser {
 public:
  // Not owned; both must outlive the rebaser.
  Rebaser(SegmentStore* segments, MetaStore* meta,
          const RebaserOptions& options = {});
  // With a compactor (not owned; before the first Enqueue): each time the
  // queue runs empty, a compaction pass is scheduled for every job that
  // was rebased since, to reclaim the records the rebases left dead (the
  // previous whole version, the forward delta); reclaim passes run
  // meanwhile (RebaserOptions::reclaim_every_bytes).
  void SetCompactor(Compactor* compactor) { compactor_ = compactor; }
  // With a predicate (before the first Enqueue): rebases wait while it says
  // clients are being served (up to RebaserOptions::max_yield each), so a
  // save's own rebases do not slow the save down on the disk and cores it
  // shares with them.
  void SetClientTraffic(std::function<bool()> busy);
  // Finishes the queued rebases, for at most 5 s; the rest are dropped.
  ~Rebaser();

  // Chunk `id` of `job` was just indexed as a delta.
  void Enqueue(const std::string& job, const format::ChunkId& id);
  // Chunk `id` of `job` was just indexed whole, replacing `previous` (the
  // same tensor's chunk in its sender's last save; elements of
  // `element_size` bytes): RebaseWhole.
  void EnqueueWhole(const std::string& job, const format::ChunkId& id,
                    const format::ChunkId& previous, uint8_t element_size);
  // Blocks until the queue is empty and no rebase runs (tests, benchmarks).
  void WaitIdle();
  RebaserStats Stats() const;

  // One rebase, on the caller's thread (the worker's body; tests call it).
  // OK also when there was nothing to do; ABORTED when an index entry
  // changed meanwhile.
  Status RebaseOne(const std::string& job, const format::ChunkId& id);
  // The server's encoding of what a client sent whole (raw where its
  // encoder was the bottleneck): the previous version B, chunk `b`, held
  // whole here, becomes a delta of Y, chunk `y`, when that saves kMinGain
  // (keyframes as above); Y stays as it came, so the newest step loads as
  // the client chose to store it. A save then adds about a delta to the
  // disk, not a whole version. OK with nothing done when Y is a delta, B
  // is not held here, not whole or of another length.
  Status RebaseWhole(const std::string& job, const format::ChunkId& y,
                     const format::ChunkId& b, uint8_t element_size);
  static constexpr double kMinGain = 0.03;

 private:
  void Loop();
  // Appends a record of chunk `id` and waits until it is durable; returns
  // its index entry (no base, no written time).
  // The newest version whole is short-lived (the next save's rebase
  // replaces it); an older version's delta lives until a gc.
  Result<ChunkMeta> Write(const std::string& job, format::Codec codec,
                          const format::ChunkId& id, uint64_t raw_length,
                          std::string_view payload, RecordLifetime lifetime);
  // While it lives, compaction removes no segment: what Write wrote is not
  // indexed yet.
  Compactor::RemovalHold HoldRemovals() {
    return compactor_ != nullptr ? compactor_->HoldRemovals()
                                 : Compactor::RemovalHold(nullptr);
  }
  // B (chunk `b`, `bm`) stays as it is while its successor was rebased:
  // where a save stored it (a short-lived segment, which the rebases of
  // its neighbours are emptying), it is copied to a long-lived one, so
  // that segment dies whole instead of standing until a compaction pass
  // copies B all the same. Needs the removal hold (HoldRemovals). The
  // rebase stands either way: a copy that fails is logged and left to
  // compaction.
  void Keep(const std::string& job, const format::ChunkId& b,
            const ChunkMeta& bm);
  // `bytes` of `job`'s records died in a rebase; schedules a reclaim pass
  // every reclaim_every_bytes.
  void Died(const std::string& job, uint64_t bytes);
  // A rebase of `job` is done: when it was the job's last one queued and
  // records died since the last reclaim pass, schedules one.
  void Done(const std::string& job);

  SegmentStore* segments_;
  MetaStore* meta_;
  Compactor* compactor_ = nullptr;
  // Yields to clients (SetClientTraffic), at most max_yield per rebase;
  // cancelled when the rebaser stops.
  std::unique_ptr<qos::BackgroundLimiter> yield_;
  const RebaserOptions options_;
  mutable absl::Mutex mu_;
  struct Item {
    std::string job;
    format::ChunkId id;
    std::optional<format::ChunkId> previous;  // EnqueueWhole
    uint8_t element_size = 1;
  };
  // One rebase of `item`; RebaseOne or RebaseWhole.
  Status Rebase(const Item& item);
  // Queues `item` unless stopping or the queue is full (then dropped).
  void Push(Item item);
  // Whether a version with `hops` deltas and `behind` bytes of them behind
  // it, of `n` raw bytes, stays whole (see above).
  bool Keyframe(uint32_t hops, uint64_t behind, size_t n) const;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> rebased_jobs_ ABSL_GUARDED_BY(mu_);  // since a pass
  // Per job, bytes died since its last reclaim pass.
  std::map<std::string, uint64_t> died_ ABSL_GUARDED_BY(mu_);
  // Per job, rebases queued or running.
  std::map<std::string, size_t> pending_ ABSL_GUARDED_BY(mu_);
  RebaserStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_REBASER_H_
