// stagger::Checkpointer: save the registered tensors of one rank as step N
// of a job, and load them back.
//
//   stagger::CheckpointerOptions o;
//   o.servers = "embedded:/tmp/ckpt"; o.job = "run1"; o.rank = r;
//   o.world_size = n;
//   auto ck = stagger::Checkpointer::Open(o);           // Result<...>
//   (*ck)->Register({"w", "F32", {1024, 1024}, w_ptr});
//   auto h = (*ck)->Save(100);  h->Wait();               // durable + committed
//   auto step = (*ck)->Load(stagger::kLatestStep);       // fills w_ptr
//
// A step is visible (Steps, Load) only when all world_size ranks committed
// it; it loads on any world size (resharding). Thread-safety: one thread
// drives a Checkpointer; SaveHandle methods may be called from any thread.
#ifndef STAGGER_CHECKPOINTER_H_
#define STAGGER_CHECKPOINTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "stagger/options.h"
#include "stagger/status.h"
#include "stagger/tensor.h"

namespace stagger {

inline constexpr int64_t kLatestStep = -1;

struct SaveStats {
  double stall_s = 0;     // time Save() (and BeforeUpdate, lazily) blocked
  double snapshot_s = 0;  // Save() call to every tensor captured
  double durable_s = 0;   // Save() call to commit acknowledged
  uint64_t bytes_raw = 0;
  uint64_t bytes_shipped = 0;  // payload bytes sent over the data plane
  uint64_t chunks = 0;
  // Chunks identical to the same chunk of this Checkpointer's previous
  // committed save: sent as references, not shipped.
  uint64_t chunks_unchanged = 0;
  // Chunks shipped as an XOR delta against their previous version.
  uint64_t chunks_delta = 0;
  // Shipped chunks per codec name ("raw", "zstd", "bytegroup+zstd",
  // "xor+bytegroup+zstd").
  std::map<std::string, uint64_t> codec_chunks;
  // Shipped chunks per reason they went out encoded or raw ("deadline",
  // "training", "sparse_delta", "wire_bound", "encoder_bound" (raw),
  // "no_gain" (raw), "fixed"; client/README.md "Codec policy").
  std::map<std::string, uint64_t> codec_reasons;
  // Changed chunks that had a previous version but whose bytes did not fit
  // delta_memory_bytes, so they could not be sent as deltas.
  uint64_t chunks_no_base = 0;
  uint64_t staging_bytes = 0;       // peak staging memory this save held
  uint64_t staging_pool_bytes = 0;  // the staging pool's size for this save
  // Bytes copied into staging. CUDA chunks whose on-device fingerprint is
  // unchanged since the previous save are not copied at all.
  uint64_t bytes_snapshotted = 0;
  // True when the state did not fit the staging pool at once, so the
  // snapshot waited for earlier chunks to drain (a longer stall).
  bool staging_limited = false;
  // Raw bytes of the chunks that began encoding and shipping before the
  // snapshot was complete (CheckpointerOptions::snapshot_overlap, or a
  // pool that ran dry).
  uint64_t bytes_overlapped = 0;
  // Most chunks at once between the encoders and their acknowledgement
  // (fingerprinted, encoded, queued or on the wire): at most twice
  // CheckpointerOptions::max_inflight_chunks.
  uint64_t peak_chunks_shipping = 0;
  // QoS: time the sender held chunks back for the training job's
  // collectives, the pacing rate it ended with (0: not paced), and the idle
  // windows between collectives it sent in.
  double yield_s = 0;
  double paced_rate_Bps = 0;
  uint64_t windows = 0;
  // Time the encoders (fingerprint, encode) paused for the training job's
  // collectives, summed over the chunks (background_cpu "idle").
  double cpu_yield_s = 0;
  // With a deadline: how long after it the save became durable (0 when
  // on time). A save that cannot meet its deadline still completes, at
  // the link's share the training job leaves idle (it keeps to the
  // collective gate), and logs one warning saying so.
  double late_s = 0;
};

// A Checkpointer's counters since it opened (Checkpointer::Metrics(), the
// metrics_listen page, Python's ck.metrics()).
struct ClientMetrics {
  uint64_t saves = 0;  // saves finished (committed or failed)
  uint64_t saves_failed = 0;
  double stall_s = 0;  // training time blocked in Save/BeforeUpdate
  // Calls blocked now in Save, WaitForRoom or WaitAll for saves in flight
  // (the training loop is waiting for checkpoint traffic; meanwhile the
  // sender yields only to collectives actually open).
  int callers_waiting = 0;
  double last_stall_s = 0;  // of the last Save() (with its BeforeUpdate)
  double snapshot_s = 0;    // sums over finished saves
  double durable_s = 0;
  double last_durable_s = 0;  // of the last finished save
  uint64_t bytes_raw = 0;
  uint64_t bytes_shipped = 0;
  uint64_t chunks = 0;
  uint64_t chunks_unchanged = 0;
  double yield_s = 0;       // QoS: held back for collectives
  uint64_t saves_late = 0;  // finished after their deadline
  double late_s = 0;
  uint64_t loads = 0;  // Load() calls that succeeded
  uint64_t loads_failed = 0;
  uint64_t bytes_loaded = 0;  // registered bytes filled by loads
  // What planning loads cost: bytes of the manifests read (summed over
  // loads), and of the last load the time from its call to its plan and
  // the number of ranks' manifests read (a resharding load reads every
  // rank's).
  uint64_t load_manifest_bytes = 0;
  double last_load_plan_s = 0;
  uint32_t last_load_manifests = 0;
  // Servers of the set marked down (did not answer at Open, or died): their
  // copies went to the next server of each ranking (replicas).
  uint64_t servers_down = 0;
  // Servers whose data connection moves payloads by cross-memory attach
  // (UCX's cma: a server on this host); the others' go over the network.
  // Each connection also logs its path once (transport/README.md).
  uint64_t servers_cross_memory = 0;
  // The default staging pool's size now (0: none yet). It is made and
  // faulted in on a thread of the Checkpointer's shortly after tensors
  // are registered, or by the first Save().
  uint64_t staging_pool_bytes = 0;
  // Bytes of staging that thread faulted in ahead of the saves.
  uint64_t staging_prefaulted_bytes = 0;
  // QoS collective gate (qos_yield "learn"): whether it holds a model of
  // the iteration, that model's period, and how often one was learned and
  // dropped (a pattern that keeps changing is dropped and relearned; until
  // then the sender yields only during marked collectives).
  bool gate_learned = false;
  double gate_period_s = 0;
  uint64_t gate_models_learned = 0;
  uint64_t gate_models_dropped = 0;
};

class SaveHandle {
 public:
  class State;
  explicit SaveHandle(std::shared_ptr<State> state);
  // Blocks until this rank's part of the step is committed, durable at the
  // save's durability (OK), or failed (its error). The step is complete,
  // and listed and loadable as "latest", once every rank of world_size
  // committed its part: Checkpointer::WaitStep waits for that.
  Status Wait() const;
  // As Wait(), for at most `timeout`: nullopt when the save is still
  // running then (it goes on; wait again or drop the handle).
  std::optional<Status> Wait(absl::Duration timeout) const;
  bool Done() const;
  SaveStats stats() const;
  int64_t step() const;

 private:
  std::shared_ptr<State> state_;
};

struct StepSummary {
  int64_t step = 0;
  bool complete = false;
  uint32_t world_size = 0;
  uint32_t ranks_committed = 0;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;  // the chunks it references, shared ones too
  uint64_t new_bytes = 0;     // what its saves shipped (its increment)
  // Complete with durability "memory" and not yet known on disk.
  bool in_memory = false;
};

class Checkpointer {
 public:
  // Connects to the servers (or starts the embedded one). INVALID_ARGUMENT
  // for bad options (naming the field), UNAVAILABLE when a server is down.
  static Result<std::unique_ptr<Checkpointer>> Open(
      const CheckpointerOptions& options);
  virtual ~Checkpointer() = default;

  // Adds a tensor. INVALID_ARGUMENT for a bad name, dtype, shape or slice,
  // a null pointer or a duplicate name; UNIMPLEMENTED for CUDA tensors in a
  // build without CUDA.
  virtual Status Register(const TensorSpec& tensor) = 0;
  // Removes every registered tensor.
  virtual void ClearRegistrations() = 0;

  // Sizes the default staging pool (CheckpointerOptions::staging_bytes 0)
  // for the tensors registered now and faults its pages in, on this
  // thread, so that Save() of them pays neither. Register() already asks
  // for the same on a background thread of the Checkpointer's, 20 ms
  // after the last registration (at idle priority with background_cpu
  // "idle"); a Save() before it is done cancels it, waiting only for the
  // slab being faulted in, and one before it started sizes the pool
  // itself; either's copies fault the remaining pages in.
  // OK at once with an explicit staging_bytes (allocated at Open), when
  // the pool already holds the state, or while a save is in flight (its
  // slabs are in use; the next Save() grows the pool).
  // RESOURCE_EXHAUSTED when the memory cannot be mapped.
  virtual Status PrepareStaging() = 0;

  // Saves every registered tensor as `step` (>= 0) of this rank. Returns
  // once every tensor is captured (or, with options.lazy, once the copies
  // are enqueued); encoding, shipping and the commit continue in the
  // background and the handle reports their outcome. Registered memory may
  // be modified once Save() returns (lazy: once BeforeUpdate() returns).
  // RESOURCE_EXHAUSTED when max_outstanding_saves are in flight and
  // fail_when_busy is set.
  virtual Result<SaveHandle> Save(int64_t step,
                                  const SaveOptions& options = {}) = 0;

  // Blocks until the snapshot of the last Save() is complete, so registered
  // tensors may be modified. Returns the snapshot's error, if it failed.
  // Returns at once when no snapshot is in progress.
  virtual Status BeforeUpdate() = 0;
  // As BeforeUpdate(), for at most `timeout`: nullopt when the snapshot is
  // still being taken then (it goes on; the tensors must not be modified
  // until a later call returns a status).
  virtual std::optional<Status> BeforeUpdate(absl::Duration timeout) = 0;

  // Blocks until every save in flight has finished (committed or failed).
  // Meanwhile the saves stop yielding to predicted collectives (only open
  // ones hold them back): the caller is taken to be the training loop,
  // which is not running any. SaveHandle::Wait() does not do this (a
  // background thread may wait on a handle while training runs).
  virtual void WaitAll() = 0;
  // As WaitAll(), for at most `timeout`; true when nothing is in flight any
  // more, false when saves are still running then (they go on).
  virtual bool WaitAll(absl::Duration timeout) = 0;
  // Saves with durability "memory" are made disk-level in the background
  // once their servers wrote them behind. Waits (up to `timeout`) until
  // every such save of this Checkpointer finished so far is: OK then;
  // DEADLINE_EXCEEDED while some are still being made disk-level; else the
  // error of the first that could not be (the step stays memory-level:
  // a chunk with fewer than `replicas` copies on disk, or a server down),
  // which is returned once.
  virtual Status WaitDisk(absl::Duration timeout) = 0;
  // Waits at most `timeout` until a Save() would not wait for the saves in
  // flight (fewer than max_outstanding_saves); true then. Like Save()'s own
  // wait, it stops the saves in flight from yielding to predicted
  // collectives meanwhile. With fail_when_busy, true at once (Save() then
  // fails instead of waiting).
  virtual bool WaitForRoom(absl::Duration timeout) = 0;

  // Counters since Open (also served at options.metrics_listen).
  virtual ClientMetrics Metrics() const = 0;
  // "host:port" the metrics page is served at; empty without metrics_listen.
  virtual std::string MetricsAddress() const = 0;

  // Loads `step` (or kLatestStep) into the registered tensors and returns
  // the step loaded. The step may have been saved by any number of ranks
  // with any slicing: each tensor's slice (TensorSpec::global_shape and
  // global_offset) is assembled from the saved slices that overlap it.
  // NOT_FOUND when the step does not exist or is not complete, a registered
  // tensor is missing from it, or part of a tensor's slice is in no saved
  // slice (the message names the region); INVALID_ARGUMENT when a tensor's
  // dtype or global shape differs; DATA_LOSS when stored bytes are corrupt
  // (the tensors may then hold partial data).
  virtual Result<int64_t> Load(int64_t step) = 0;
  // As Load(step), stopping once `cancel` turns true (from any thread): no
  // new fetch is issued and CANCELLED is returned once the fetches in
  // flight have finished (the tensors then hold partial data).
  virtual Result<int64_t> Load(int64_t step,
                               const std::atomic<bool>& cancel) = 0;
  // The per-rank tensors (registered without a global shape) that the last
  // Load() filled from another rank's save, each with that rank. A rank
  // the saving job did not have (a load on more ranks than saved) gets the
  // lowest saved rank's: its RNG states and counters included. Empty when
  // each came from this rank's own save.
  virtual std::map<std::string, uint32_t> LastLoadFromOtherRanks() const = 0;

  // Complete steps, oldest first (partial ones too when asked).
  virtual Result<std::vector<StepSummary>> Steps(bool include_partial) = 0;

  // Waits until every rank of world_size committed `step` (OK), for at
  // most `timeout`. DEADLINE_EXCEEDED then, naming the ranks committed and
  // those missing (a rank that did not save the step, or a world_size that
  // is not the job's); errors listing the steps are retried until then
  // and the last one is returned. INVALID_ARGUMENT for a negative step.
  virtual Status WaitStep(int64_t step, absl::Duration timeout) = 0;
  // As Steps(), on a thread of its own; `done` gets the result on that
  // thread. The caller need not wait (an interrupted caller moves on): the
  // Checkpointer's destructor waits for the calls in flight.
  virtual void StepsAsync(
      bool include_partial,
      std::function<void(Result<std::vector<StepSummary>>)> done) = 0;

  // QoS marks from the training loop (any thread, cheap, never block).
  // CollectiveBegin/End bracket a collective of the job (e.g. a gradient
  // all-reduce): checkpoint traffic yields while it runs (options
  // qos_yield). Calls nest. IterationBegin marks the start of a training
  // iteration, from which the sender learns when collectives come.
  virtual void CollectiveBegin() = 0;
  virtual void CollectiveEnd() = 0;
  virtual void IterationBegin() = 0;
};

// Marks a collective for its scope:
//   { stagger::CollectiveScope c(ck.get()); all_reduce(...); }
class CollectiveScope {
 public:
  explicit CollectiveScope(Checkpointer* ck) : ck_(ck) {
    ck_->CollectiveBegin();
  }
  ~CollectiveScope() { ck_->CollectiveEnd(); }
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  Checkpointer* ck_;
};

}  // namespace stagger

#endif  // STAGGER_CHECKPOINTER_H_
