// The Checkpointer behind include/stagger/checkpointer.h. The public
// Checkpointer::Open lives in client/embedded/ (it may start an embedded
// server); this core library never depends on server code.
//
//   CheckpointerImpl ─┬─ transport (shared, process-wide UCX by default)
//                     ├─ ServerSet (gRPC stubs + data connections)
//                     ├─ Shaping (pacing, stagger slot, collective gate)
//                     ├─ Executors: pipeline (fingerprint, encode), driver
//                     │   (a thread per outstanding save), fetch (decode)
//                     ├─ SnapshotSources: host, one per CUDA device
//                     ├─ Staging (the pool; memory.h, spare_pool.h)
//                     ├─ CodecPolicy + ChunkIo (puts via the Sender,
//                     │   fetches for loads: chunk_io.h, loader.h)
//                     ├─ StepGuard (committed steps are final)
//                     ├─ registered TensorSpecs, and per tensor the
//                     │   chunk history deltas are planned from
//                     │   (save_plan.h); each Save() runs a SaveJob
//                     │   (save_job.h)
//                     └─ metrics (and their HTTP exporter)
#ifndef STAGGER_CLIENT_CHECKPOINTER_IMPL_H_
#define STAGGER_CLIENT_CHECKPOINTER_IMPL_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/chunk_io.h"
#include "client/client_metrics.h"
#include "client/host_snapshot.h"
#include "client/loader.h"
#include "client/memory.h"
#include "client/promote.h"
#include "client/save_job.h"
#include "client/save_plan.h"
#include "client/server_set.h"
#include "client/shaping.h"
#include "client/shared_pools.h"
#include "client/staging_pool.h"
#include "client/staging_prep.h"
#include "client/step_guard.h"
#include "client/thread_plan.h"
#include "metrics/http_exporter.h"
#include "stagger/checkpointer.h"
#include "transport/transport.h"

namespace stagger::client {

// Thread-safety: as Checkpointer (include/stagger/checkpointer.h). Members
// are grouped below by what guards them: set at construction and then
// read only; thread-safe objects of their own; and each mutex followed by
// the members it guards. Declaration order is kept for destruction: what
// is declared later goes first.
class CheckpointerImpl : public Checkpointer {
 public:
  CheckpointerImpl(const CheckpointerOptions& options,
                   std::shared_ptr<void> keepalive,
                   std::shared_ptr<transport::Transport> transport,
                   std::shared_ptr<ServerSet> servers,
                   std::unique_ptr<StagingPool> pool,
                   std::unique_ptr<Shaping> shaping);

  ~CheckpointerImpl() override;

  Status Register(const TensorSpec& t) override;

  void ClearRegistrations() override;

  void PrimeStepGuard();

  Status PrepareStaging() override;

  Result<SaveHandle> Save(int64_t step, const SaveOptions& so) override;

  Status WaitDisk(absl::Duration timeout) override;

  void CollectiveBegin() override;
  void CollectiveEnd() override;
  void IterationBegin() override;

  Status BeforeUpdate() override;

  std::optional<Status> BeforeUpdate(absl::Duration timeout) override;

  ClientMetrics Metrics() const override;

  std::string MetricsAddress() const override;

  // Serves Metrics() at options_.metrics_listen, if set.
  Status StartMetrics();

  void WaitAll() override;

  bool WaitForRoom(absl::Duration timeout) override;

  bool WaitAll(absl::Duration timeout) override;

  Result<int64_t> Load(int64_t step) override;

  Result<int64_t> Load(int64_t step, const std::atomic<bool>& cancel) override;

  void StepsAsync(
      bool include_partial,
      std::function<void(Result<std::vector<StepSummary>>)> done) override;

  Result<std::vector<StepSummary>> Steps(bool include_partial) override;
  Status WaitStep(int64_t step, absl::Duration timeout) override;
  std::map<std::string, uint32_t> LastLoadFromOtherRanks() const override;

 private:
  // snapshot_overlap for a save whose chunks come from `chunks`' sources.
  bool ShipWhileSnapshotting(const std::vector<SaveChunk>& chunks) const;

  // Staging for the tensors registered now that this rank stores.
  uint64_t RegisteredStaging() const;

  // On the prep thread: sizes the pool, unless a save holds it (it grows
  // at a later save then), and faults it in a slab at a time until done or
  // a save comes (whose copies fault the rest).
  Status PrepareInBackground(uint64_t bytes,
                             const std::function<bool()>& cancelled);

  static Status CheckSaveArguments(int64_t step, const SaveOptions& so);

  // Orders the copies after the caller's queued work (CUDA: an event on the
  // caller's stream), on the caller's thread, and sizes the staging pool
  // for the plan.
  Status ReadyToCopy(const SavePlan& plan, const SaveOptions& so);

  // Runs the save on the driver thread; its slot is given back when it
  // ends, and a committed save becomes the next one's history.
  void Launch(const std::shared_ptr<SaveJob>& job);

  // A server that restarted since the last save is found now, not by a
  // failed put; with too few servers left, waits a little for them (a
  // restart takes seconds), never beyond the save's deadline. Fails before
  // anything is copied when no server could take the copies.
  Status AwaitServers(int64_t step, const SaveOptions& so);

  // Durability "memory" needs `replicas` failure domains among the servers
  // up: a copy in each, so that losing all but one of them keeps the step.
  Status CheckDomains(int64_t step) const;

  // Takes one of the max_outstanding_saves slots, waiting for a save in
  // flight to finish (or failing with fail_when_busy). The caller gives it
  // back (SaveSlot).
  Status TakeSaveSlot(int64_t step);

  // The plan of a save of the registered tensors this rank stores as
  // `step` (save_plan.h), with their history from the last commit.
  SavePlan Plan(int64_t step);

  Result<int64_t> LoadTargets(int64_t step, const std::atomic<bool>& cancel,
                              LoadPlanning* planning);
  struct Registered {
    TensorSpec spec;
    uint64_t bytes;
  };

  // A replicated tensor (every rank holds all of it) is stored by rank 0
  // only; the loader reads rank 0's copy for every rank.
  bool Stores(const Registered& reg) const;

  uint64_t SizeOf(const TensorSpec& t) const;

  SnapshotSource* SourceFor(const TensorSpec& t);

  // The snapshot source of CUDA device `device`, created on first use.
  Result<SnapshotSource*> CudaSource(int device);

  // Adds a finished save to the metrics, before the handle reports its
  // outcome (SaveJobDeps::on_finished).
  void CountFinished(const Status& status, const SaveStats& st);

  // --- Set at construction, then read only. Declaration order is
  // destruction order reversed: connections close before the transport,
  // and both before the embedded server.
  CheckpointerOptions options_;
  std::shared_ptr<void> keepalive_;
  std::shared_ptr<transport::Transport> transport_;
  std::shared_ptr<ServerSet> servers_;
  std::unique_ptr<Shaping> shaping_;
  const ThreadPlan threads_;  // counts and priorities, from the cores

  // --- Thread-safe objects of their own (executors, sources, staging).
  // Fingerprint, encode: shared with the process's other Checkpointers
  // of the same plan (shared_pools.h).
  std::shared_ptr<Executor> executor_;
  Executor driver_;  // one thread per outstanding save
  // Makes memory-level saves disk-level, in the order saved; its queue
  // runs out before the connections go.
  Promoter promoter_{servers_.get(), options_.replicas, options_.rpc_timeout_s};
  // Loads: decode fetched chunks, and fetch a delta's bases (blocking), so
  // more threads than cores; shared like executor_.
  std::shared_ptr<Executor> fetch_executor_;
  std::unique_ptr<SnapshotSource> host_source_;
  std::map<int, std::unique_ptr<SnapshotSource>> cuda_sources_;
  Staging staging_;  // pinned with the first of cuda_sources_
  std::atomic<uint64_t> staging_prefaulted_{0};  // by prep_
  // Sizes staging_ ahead of the first Save(); destroyed before it.
  static constexpr absl::Duration kPrepQuiet = absl::Milliseconds(20);
  StagingPrep prep_{
      [this](uint64_t bytes, const std::function<bool()>& cancelled) {
        return PrepareInBackground(bytes, cancelled);
      },
      options_.background_cpu == BackgroundCpu::kIdle};
  // --- async_mu_: StepsAsync calls still running (the destructor waits
  // for them).
  absl::Mutex async_mu_;
  int async_calls_ ABSL_GUARDED_BY(async_mu_) = 0;

  // --- Thread-safe objects of their own (the codec policy, chunk puts and
  // fetches, the committed-steps guard).
  CodecPolicy policy_;
  ChunkIo io_;
  StepGuard step_guard_;

  // --- The driving thread's (Register, ClearRegistrations, Save's plan):
  // one thread drives a Checkpointer.
  std::map<std::string, Registered> tensors_;
  StagingTally registered_staging_{options_.chunk_size};  // of tensors_

  // The outstanding-save slot a Save() took: given back when Save()
  // returns early, unless handed over to the save's driver.
  class SaveSlot {
   public:
    explicit SaveSlot(CheckpointerImpl* ck) : ck_(ck) {}
    SaveSlot(const SaveSlot&) = delete;
    SaveSlot& operator=(const SaveSlot&) = delete;
    ~SaveSlot() {
      if (ck_ == nullptr) return;
      absl::MutexLock lock(&ck_->save_mu_);
      --ck_->outstanding_;
    }
    void HandOver() { ck_ = nullptr; }

   private:
    CheckpointerImpl* ck_;
  };

  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(save_mu_);

  // --- save_mu_: the outstanding saves and what the next save plans from
  // (driver threads finish saves while the driving thread starts them).
  absl::Mutex save_mu_;
  int outstanding_ ABSL_GUARDED_BY(save_mu_) = 0;
  std::shared_ptr<SaveJob> last_job_ ABSL_GUARDED_BY(save_mu_);
  std::map<std::string, PreviousChunks> previous_ ABSL_GUARDED_BY(save_mu_);
  uint64_t memory_restarts_seen_ ABSL_GUARDED_BY(save_mu_) = 0;

  // --- metrics_mu_: the counters Metrics() reports.
  mutable absl::Mutex metrics_mu_;
  ClientMetrics metrics_ ABSL_GUARDED_BY(metrics_mu_);
  std::map<std::string, uint32_t> last_load_from_other_ranks_
      ABSL_GUARDED_BY(metrics_mu_);

  // Last: stopped first, while everything it reads still exists.
  std::unique_ptr<metrics::HttpExporter> metrics_exporter_;
};

// Validates options (INVALID_ARGUMENT naming the field), connects to
// `servers` (gRPC addresses) over `transport` and returns a Checkpointer.
// `keepalive` is held for the Checkpointer's lifetime (e.g. an embedded
// server); it is released after the connections close.
Result<std::unique_ptr<Checkpointer>> NewCheckpointer(
    const CheckpointerOptions& options, const std::string& servers,
    std::shared_ptr<transport::Transport> transport,
    std::shared_ptr<void> keepalive);

// Checks the fields of `options` other than `servers`.
Status ValidateOptions(const CheckpointerOptions& options);

// The process-wide UCX transport, created on first use and kept while
// anyone holds it.
Result<std::shared_ptr<transport::Transport>> SharedUcxTransport();

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CHECKPOINTER_IMPL_H_
