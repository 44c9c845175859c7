// SaveJob: one Save() in flight, from snapshot to commit.
//
//   caller thread      Save(): plan chunks, Fence() the sources, Start()
//   driver thread      for each chunk: take a staging slab (waits while the
//                      pool is full), Copy() it from the tensor
//   source threads     captured -> count down the snapshot;
//                      in staging -> hand the slab to the pipeline (held
//                      back until the snapshot is complete, so encoding
//                      does not compete with the copies the training loop
//                      waits for, unless the pool runs dry and draining is
//                      the only way forward)
//   pipeline threads   fingerprint + encode + queue the put (ChunkIo)
//   transport thread   put acknowledged durable -> release the slab
//   driver thread      after every ack: CommitShard, finish the handle
//
// Invariants: a slab returns to the pool only when nothing reads it any
// more; the commit is sent only after every chunk is durable; the handle
// finishes exactly once. Thread-safety: all methods are thread-safe.
#ifndef STAGGER_CLIENT_SAVE_JOB_H_
#define STAGGER_CLIENT_SAVE_JOB_H_

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/chunk_io.h"
#include "client/internal/save_state.h"
#include "client/server_set.h"
#include "client/shaping.h"
#include "client/snapshot_source.h"
#include "client/staging_pool.h"
#include "format/manifest.pb.h"
#include "util/executor.h"

namespace stagger::client {

struct SaveChunk {
  const char* src;  // tensor memory (host or device)
  size_t len;
  SnapshotSource* source;  // how to copy it
  pb::ChunkRef* ref;       // in the job's manifest
  // Every server, ranked for its slot (ServerSet::ForSlot): it is stored
  // on the first SaveJobDeps::replicas of them that are up.
  std::vector<ServerConn*> servers;
  int element_size;  // float element width (byte grouping), else 0
  // The id this chunk had in the previous committed save, if any: when the
  // bytes hash the same, the chunk is referenced, not shipped.
  std::optional<format::ChunkId> previous;
  // The previous version's bytes, to encode a delta against (deltas on).
  std::shared_ptr<const std::string> previous_bytes;
  // Whether the previous version was stored on every one of this slot's
  // home servers (the first replicas of `servers`): not when it failed over
  // to others while one of them was down.
  bool previous_at_home = false;
  // Fingerprint the chunk where it lives (device memory) before copying;
  // when it matches `previous_fingerprint` the chunk is not copied at all.
  bool fingerprint_in_place = false;
  std::optional<std::array<uint64_t, 2>> previous_fingerprint;
  // Keep this chunk's bytes as the next save's delta base (it fits
  // delta_memory_bytes).
  bool keep_bytes = false;
  // It has a previous version whose bytes were not kept (they did not fit
  // delta_memory_bytes): if changed, it cannot go as a delta.
  bool base_not_held = false;
};

// What a committed save leaves for the next one, per chunk.
struct ChunkOutcome {
  bool unchanged = false;
  bool delta = false;
  // Stored on every home server of its slot (SaveChunk::previous_at_home
  // of the next save).
  bool at_home = false;
  std::shared_ptr<const std::string> bytes;  // kept when deltas are on
  std::optional<std::array<uint64_t, 2>> fingerprint;  // in-place, if taken
};

struct SaveJobDeps {
  ServerSet* servers;
  ChunkIo* io;
  StagingPool* pool;
  Executor* pipeline;
  Shaping* shaping;  // QoS of the sender (the save's stats read it)
  size_t replicas = 1;
  // Ship each chunk as soon as it is captured, instead of holding the
  // captured ones back until the whole snapshot is taken.
  bool ship_while_snapshotting = false;
  // At most this many chunks between the pipeline and their acknowledgement
  // (fingerprinted, encoded, queued or in flight); the rest wait in staging
  // in order. It keeps the encoders just ahead of the wire instead of
  // racing ahead of it: their CPU goes to moving bytes already ready, and
  // encoded copies never pile up. 0: no bound.
  size_t ship_window = 0;
  // Runs with the save's outcome and stats just before its handle reports
  // them, so that counters (Checkpointer::Metrics) include the save by the
  // time a Wait() returns. Optional.
  std::function<void(const Status&, const SaveStats&)> on_finished;
  // Durability "memory": puts may be acknowledged from servers' RAM (the
  // manifest says in_memory, and is committed memory-level).
  bool in_memory = false;
};

class SaveJob : public std::enable_shared_from_this<SaveJob> {
 public:
  using Clock = std::chrono::steady_clock;

  // `manifest` is complete except for chunk refs, which `chunks` point into.
  // The bytes of each shipped chunk with SaveChunk::keep_bytes are kept
  // (outcomes()) so the next save can encode deltas against them.
  SaveJob(SaveJobDeps deps, pb::ShardManifest manifest,
          std::vector<SaveChunk> chunks, Clock::time_point start);

  // Runs the save on the calling (driver) thread until it is committed or
  // failed, then finishes the handle.
  void Run();

  // Blocks until every chunk is captured (or the snapshot failed); returns
  // the snapshot's status.
  Status WaitSnapshot();
  // As WaitSnapshot(), for at most `timeout`; nullopt when not done then.
  std::optional<Status> WaitSnapshot(absl::Duration timeout);

  std::shared_ptr<SaveHandle::State> handle_state() const { return state_; }
  // The manifest; complete (chunk ids filled) once Run() has returned OK.
  const pb::ShardManifest& manifest() const { return manifest_; }
  // The outcome of Run(); valid once it has returned.
  const Status& status() const { return status_; }
  // Per chunk, in the order given; valid once Run() has returned OK.
  const std::vector<ChunkOutcome>& outcomes() const { return outcomes_; }
  // Adds time the caller was blocked (Save, BeforeUpdate) to the stall.
  void AddStall(double s) { state_->AddStall(s); }
  // Save() is returning, after blocking `s` seconds: adds it to the stall.
  // The commit waits for this, so that the stall stored with the manifest
  // is Save()'s whole stall (a lazy save's BeforeUpdate wait comes later
  // and is not in it).
  void CallerReturned(double s);

 private:
  void ChunkCaptured(const Status& s);
  void ChunkInStaging(size_t i, char* slab, const Status& s);
  void ChunkDone(const Status& s);
  void ReleaseSlab(char* slab);
  // Fingerprints in place the chunks that ask for it; marks in `unchanged`
  // those whose fingerprint matches the previous save's.
  void FingerprintInPlace(std::vector<bool>* unchanged);
  // Whether `c`'s previous version is on every home server of its slot and
  // all of them are up: only then may an unchanged chunk be referenced
  // instead of shipped, or a changed one be sent as a delta against it (the
  // server that takes a delta must hold its base).
  bool HomeUp(const SaveChunk& c) const;
  // Whether every home server of `c`'s slot is up.
  bool ServersUp(const SaveChunk& c) const;
  // Takes a ship window slot for chunk `i` (true: Ship it now), or queues
  // it behind the chunks already waiting for one (false).
  bool TakeSlotLocked(size_t i, char* slab) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fingerprints, encodes and puts chunk `i`; it holds a window slot.
  void Ship(size_t i, char* slab);
  // A shipped chunk is done: frees its window slot for the next one.
  void Shipped(const Status& s);
  // Fingerprints in place, then hands every changed chunk to its source
  // to copy into a slab (waiting for slabs while the pool is dry); returns
  // the bytes copied.
  uint64_t Snapshot();
  // The save's figures once every chunk is done.
  SaveStats CollectStats(uint64_t snapshotted, const ShapingStats& qos);
  // The figures the manifest stores (ShardStats), before the commit.
  void RecordShardStats(const SaveStats& stats);
  // The warning a save that missed its deadline logs.
  void LogLate(const SaveStats& st, double deadline_s) const;
  // Chunk `i` is the same as its previous version `id`: referenced in the
  // manifest and counted, not shipped.
  void ReferenceUnchanged(size_t i, const format::ChunkId& id);
  // Counts chunk `i` in SaveStats::bytes_overlapped when it goes to the
  // encoders before the snapshot is complete.
  void CountOverlapLocked(size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts shipping every held-back chunk, and every later one at once.
  void StartDraining();

  SaveJobDeps deps_;
  pb::ShardManifest manifest_;
  std::vector<SaveChunk> chunks_;
  const Clock::time_point start_;
  std::shared_ptr<SaveHandle::State> state_;
  PutStats put_stats_;
  const Shaping::Mark shaping_start_;
  Status status_;
  std::vector<ChunkOutcome> outcomes_;  // slot i written by chunk i only

  absl::Mutex mu_;
  size_t uncaptured_ ABSL_GUARDED_BY(mu_);
  size_t unfinished_ ABSL_GUARDED_BY(mu_);
  bool snapshot_done_ ABSL_GUARDED_BY(mu_) = false;
  bool caller_returned_ ABSL_GUARDED_BY(mu_) = false;
  Status first_error_ ABSL_GUARDED_BY(mu_);
  double snapshot_s_ ABSL_GUARDED_BY(mu_) = 0;
  bool staging_limited_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t overlapped_ ABSL_GUARDED_BY(mu_) = 0;  // SaveStats::bytes_overlapped
  std::vector<std::pair<size_t, char*>> deferred_ ABSL_GUARDED_BY(mu_);
  // Chunks holding a ship window slot, and those waiting for one.
  size_t shipping_ ABSL_GUARDED_BY(mu_) = 0;
  size_t peak_shipping_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::pair<size_t, char*>> waiting_ ABSL_GUARDED_BY(mu_);
  uint64_t held_ ABSL_GUARDED_BY(mu_) = 0;       // staging bytes held now
  uint64_t peak_held_ ABSL_GUARDED_BY(mu_) = 0;  // most held at once
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_SAVE_JOB_H_
