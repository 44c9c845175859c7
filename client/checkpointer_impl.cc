#include "client/checkpointer_impl.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/control.h"
#include "client/cuda/cuda_copy.h"
#include "client/cuda/cuda_snapshot.h"
#include "client/internal/save_state.h"
#include "format/manifest.h"
#include "format/names.h"
#include "transport/ucx_transport.h"
#include "util/log.h"

namespace stagger {

SaveHandle::SaveHandle(std::shared_ptr<State> state)
    : state_(std::move(state)) {}
Status SaveHandle::Wait() const { return state_->Wait(); }
std::optional<Status> SaveHandle::Wait(absl::Duration timeout) const {
  return state_->WaitFor(timeout);
}
bool SaveHandle::Done() const { return state_->Done(); }
SaveStats SaveHandle::stats() const { return state_->stats(); }
int64_t SaveHandle::step() const { return state_->step(); }

namespace client {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

CheckpointerImpl::CheckpointerImpl(
    const CheckpointerOptions& options, std::shared_ptr<void> keepalive,
    std::shared_ptr<transport::Transport> transport,
    std::shared_ptr<ServerSet> servers, std::unique_ptr<StagingPool> pool,
    std::unique_ptr<Shaping> shaping)
    : options_(options),
      keepalive_(std::move(keepalive)),
      transport_(std::move(transport)),
      servers_(std::move(servers)),
      shaping_(std::move(shaping)),
      threads_(PlanThreads(options, qos::ReadCpuShare())),
      executor_(SharedPool("stg-encode", threads_.pipeline_threads,
                           threads_.background_init != nullptr,
                           threads_.background_init)),
      driver_(options.max_outstanding_saves, "stg-save"),
      fetch_executor_(SharedPool("stg-fetch", ChunkIo::DefaultFetchThreads(),
                                 /*idle=*/false, nullptr)),
      host_source_(NewHostSnapshotSource(threads_.copy_threads)),
      staging_(std::move(pool), options.chunk_size, options.job),
      policy_(threads_.encoder_threads),
      io_(fetch_executor_.get(), options.job, options.codec,
          format::EncodeOptions{options.zstd_level},
          options.max_inflight_chunks,
          options.adaptive_codec ? &policy_ : nullptr, shaping_.get()),
      step_guard_(options.job, options.rank, [this] {
        return ListSteps(*servers_, options_.job, /*include_partial=*/true);
      }) {
  io_.SetServers(servers_.get());
}

CheckpointerImpl::~CheckpointerImpl() {
  prep_.Settle();  // its preparation uses members destroyed before it
  WaitAll();
  {
    absl::MutexLock lock(&async_mu_);
    async_mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &async_calls_));
  }
  staging_.Unpin();  // while the CUDA source exists
}

bool CheckpointerImpl::ShipWhileSnapshotting(
    const std::vector<SaveChunk>& chunks) const {
  if (options_.snapshot_overlap != SnapshotOverlap::kAuto) {
    return options_.snapshot_overlap == SnapshotOverlap::kOn;
  }
  for (const SaveChunk& c : chunks) {
    if (c.source == host_source_.get()) {
      // Host copies take cores: overlap only where as many are left over.
      return threads_.HostCopiesLeaveCores();
    }
  }
  return true;  // all on CUDA devices: the copy engines move the bytes
}

Status CheckpointerImpl::Register(const TensorSpec& t) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("tensor", t.name));
  auto bytes = format::TensorBytes(t.dtype, t.shape);
  if (!bytes.ok()) {
    return WithContext(bytes.status(), absl::StrCat("tensor '", t.name, "'"));
  }
  Status slice =
      format::ValidateSlice(t.shape, t.global_shape, t.global_offset);
  if (!slice.ok()) {
    return WithContext(slice, absl::StrCat("tensor '", t.name, "'"));
  }
  if (t.data == nullptr && *bytes > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' has no data pointer"));
  }
  if (t.device == Device::kCuda) {
    auto src = CudaSource(t.device_index);
    if (!src.ok()) {
      return WithContext(
          src.status(),
          absl::StrCat("tensor '", t.name, "' on cuda:", t.device_index));
    }
  }
  if (tensors_.count(t.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' is already registered"));
  }
  auto added = tensors_.emplace(t.name, Registered{t, *bytes});
  if (Stores(added.first->second)) registered_staging_.Add(*bytes);
  if (!staging_.fixed()) prep_.Request(RegisteredStaging(), kPrepQuiet);
  return absl::OkStatus();
}

uint64_t CheckpointerImpl::RegisteredStaging() const {
  return registered_staging_.Needed();
}

Status CheckpointerImpl::PrepareInBackground(
    uint64_t bytes, const std::function<bool()>& cancelled) {
  {
    absl::MutexLock lock(&save_mu_);
    if (outstanding_ > 0) return absl::OkStatus();
  }
  StagingPool* const before = staging_.pool();
  STAGGER_RETURN_IF_ERROR(
      staging_.Size(bytes, /*in_use=*/false, /*populate=*/false));
  StagingPool* pool = staging_.pool();
  // The pool already held the state: earlier saves faulted it in.
  if (pool == before) return absl::OkStatus();
  while (!cancelled() && pool->FaultInNext()) {
    staging_prefaulted_ += pool->slab_bytes();
  }
  return absl::OkStatus();
}

void CheckpointerImpl::ClearRegistrations() {
  tensors_.clear();
  registered_staging_.Clear();
}

void CheckpointerImpl::PrimeStepGuard() { step_guard_.Prime(); }

Status CheckpointerImpl::PrepareStaging() {
  prep_.Settle();  // one preparation at a time
  bool in_use;
  {
    absl::MutexLock lock(&save_mu_);
    in_use = outstanding_ > 0;
  }
  return staging_.Size(RegisteredStaging(), in_use);
}

Result<SaveHandle> CheckpointerImpl::Save(int64_t step, const SaveOptions& so) {
  auto start = std::chrono::steady_clock::now();
  STAGGER_RETURN_IF_ERROR(CheckSaveArguments(step, so));
  STAGGER_RETURN_IF_ERROR(AwaitServers(step, so));
  const Durability durability = so.durability == Durability::kDefault
                                    ? options_.durability
                                    : so.durability;
  const bool in_memory = durability == Durability::kMemory;
  if (in_memory) STAGGER_RETURN_IF_ERROR(CheckDomains(step));
  // Before anything is copied: a step this rank committed is final.
  STAGGER_RETURN_IF_ERROR(step_guard_.Check(step));
  STAGGER_RETURN_IF_ERROR(TakeSaveSlot(step));
  SaveSlot slot(this);  // given back on every return before the submit
  SavePlan plan = Plan(step);
  // A background preparation still waiting is dropped (this save sizes
  // the pool); one under way stops after its current slab. Only then is
  // the pool read: the preparation may have replaced it.
  prep_.Settle();
  STAGGER_RETURN_IF_ERROR(ReadyToCopy(plan, so));
  shaping_->StartSave(plan.state_bytes, so.deadline_s >= 0
                                            ? so.deadline_s
                                            : options_.qos_deadline_s);
  const bool overlap = ShipWhileSnapshotting(plan.chunks);
  SaveJobDeps deps{servers_.get(),
                   &io_,
                   staging_.pool(),
                   executor_.get(),
                   shaping_.get(),
                   options_.replicas,
                   overlap,
                   2 * options_.max_inflight_chunks,
                   [this, step](const Status& s, const SaveStats& st) {
                     // Before Wait() returns: a save of the same step
                     // right after it is refused.
                     if (s.ok()) step_guard_.Committed(step);
                     CountFinished(s, st);
                   }};
  deps.in_memory = in_memory;
  plan.manifest->set_in_memory(in_memory);
  auto job =
      std::make_shared<SaveJob>(std::move(deps), std::move(*plan.manifest),
                                std::move(plan.chunks), start);
  slot.HandOver();  // the driver gives it back when the save ends
  Launch(job);
  if (!so.lazy) job->WaitSnapshot().IgnoreError();  // the handle reports it
  const double stall = Seconds(start);
  job->CallerReturned(stall);
  {
    absl::MutexLock lock(&metrics_mu_);
    metrics_.stall_s += stall;
    metrics_.last_stall_s = stall;
  }
  return SaveHandle(job->handle_state());
}

Status CheckpointerImpl::CheckSaveArguments(int64_t step,
                                            const SaveOptions& so) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step must be >= 0, got ", step));
  }
  if (!std::isfinite(so.deadline_s)) {
    return absl::InvalidArgumentError("SaveOptions.deadline_s is not finite");
  }
  return absl::OkStatus();
}

Status CheckpointerImpl::ReadyToCopy(const SavePlan& plan,
                                     const SaveOptions& so) {
  STAGGER_RETURN_IF_ERROR(host_source_->Fence(so.cuda_stream));
  for (auto& [device, src] : cuda_sources_) {
    STAGGER_RETURN_IF_ERROR(src->Fence(so.cuda_stream));
  }
  bool in_use;
  {
    absl::MutexLock lock(&save_mu_);
    in_use = outstanding_ > 1;  // another save holds staging slabs
  }
  // A new pool is faulted in by the snapshot's copies, on the copy
  // threads and in parallel, not here on the caller's thread: a lazy
  // save's copies run while the training loop goes on, and an eager
  // one's fault in parallel what one thread would fault alone
  // (qos/README.md, "CPU": measured).
  return staging_.Size(StagingNeeded(plan.tensor_bytes, options_.chunk_size),
                       in_use, /*populate=*/false);
}

void CheckpointerImpl::Launch(const std::shared_ptr<SaveJob>& job) {
  {
    absl::MutexLock lock(&save_mu_);
    last_job_ = job;
  }
  driver_.Submit([this, job] {
    job->Run();
    if (job->status().ok() && job->manifest().in_memory()) {
      promoter_.Queue(job->manifest());
    }
    absl::MutexLock lock(&save_mu_);
    if (job->status().ok()) {
      RememberOutcomes(job->manifest(), job->outcomes(), &previous_);
    } else if (absl::IsFailedPrecondition(job->status()) &&
               absl::StrContains(job->status().message(),
                                 "which is not stored")) {
      // A delta's base is gone from its server (one that restarted
      // without chunks it held in memory only): the next save sends
      // every changed chunk whole instead of failing the same way.
      previous_.clear();
    }
    --outstanding_;
  });
}

Status CheckpointerImpl::WaitDisk(absl::Duration timeout) {
  return promoter_.WaitDisk(timeout);
}

Status CheckpointerImpl::AwaitServers(int64_t step, const SaveOptions& so) {
  servers_->NoteBrokenConnections();
  if (servers_->up() >= options_.replicas) return absl::OkStatus();
  double wait_s = options_.server_wait_s;
  const double deadline_s =
      so.deadline_s >= 0 ? so.deadline_s : options_.qos_deadline_s;
  if (deadline_s > 0) wait_s = std::min(wait_s, deadline_s);
  return WithContext(
      servers_->AwaitUp(options_.replicas, absl::Seconds(wait_s)),
      absl::StrCat("save of step ", step));
}

Status CheckpointerImpl::CheckDomains(int64_t step) const {
  const std::set<std::string> domains = servers_->DomainsUp();
  if (domains.size() >= options_.replicas) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "save of step ", step, " with durability \"memory\" needs its ",
      options_.replicas, " copies in ", options_.replicas,
      " failure domains, and the servers up are in ", domains.size(), " (",
      absl::StrJoin(domains, ", "),
      "): name each node's server with stagger-server --domain, bring "
      "more up, or save with durability \"disk\""));
}

Status CheckpointerImpl::TakeSaveSlot(int64_t step) {
  absl::MutexLock lock(&save_mu_);
  if (outstanding_ >= options_.max_outstanding_saves) {
    if (options_.fail_when_busy) {
      return absl::ResourceExhaustedError(
          absl::StrCat("save of step ", step, ": ", outstanding_,
                       " save(s) already in flight (max_outstanding_saves=",
                       options_.max_outstanding_saves, ")"));
    }
    // Training waits for the save in flight: it may stop yielding to
    // collectives that will not come.
    shaping_->CallerWaits(true);
    save_mu_.Await(absl::Condition(this, &CheckpointerImpl::HasRoom));
    shaping_->CallerWaits(false);
  }
  ++outstanding_;
  return absl::OkStatus();
}

SavePlan CheckpointerImpl::Plan(int64_t step) {
  SavePlanOptions po;
  po.job = options_.job;
  po.step = step;
  po.rank = options_.rank;
  po.world_size = options_.world_size;
  po.replicas = options_.replicas;
  po.node = servers_->local_node();
  po.chunk_size = options_.chunk_size;
  po.created_unix_ms = NowMs();
  po.deltas_on =
      options_.delta_chain_max > 0 && options_.codec != CodecChoice::kRaw;
  po.delta_chain_max = options_.delta_chain_max;
  // The previous version of each chunk, kept as its delta base, and the
  // new one being captured meanwhile: half the budget each.
  po.keep_budget = DeltaMemoryBytes(options_) / 2;
  po.slot_servers = [this](const std::string& name, uint64_t index) {
    return servers_->ForSlot(options_.rank, name, index,
                             servers_->local_node());
  };
  std::vector<PlanTensor> stored;
  {
    absl::MutexLock lock(&save_mu_);  // a save may finish meanwhile
    const uint64_t restarts = servers_->memory_restarts();
    if (restarts != memory_restarts_seen_) {
      // A server with a memory tier restarted: chunks earlier saves left
      // in its RAM only may be gone. Neither referenced as unchanged nor
      // used as delta bases: this save sends every chunk.
      memory_restarts_seen_ = restarts;
      previous_.clear();
    }
    for (const auto& [name, reg] : tensors_) {
      if (!Stores(reg)) continue;
      PlanTensor t{&reg.spec, reg.bytes, SourceFor(reg.spec), {}};
      auto it = previous_.find(name);
      if (it != previous_.end() && it->second.bytes == reg.bytes &&
          it->second.chunk_size == options_.chunk_size) {
        t.previous = it->second;  // copied
      }
      stored.push_back(std::move(t));
    }
  }
  return PlanSave(po, std::move(stored));
}

void CheckpointerImpl::CollectiveBegin() { shaping_->CollectiveBegin(); }

void CheckpointerImpl::CollectiveEnd() { shaping_->CollectiveEnd(); }

void CheckpointerImpl::IterationBegin() { shaping_->IterationBegin(); }

Status CheckpointerImpl::BeforeUpdate() {
  return *BeforeUpdate(absl::InfiniteDuration());
}

std::optional<Status> CheckpointerImpl::BeforeUpdate(absl::Duration timeout) {
  auto start = std::chrono::steady_clock::now();
  std::shared_ptr<SaveJob> job;
  {
    absl::MutexLock lock(&save_mu_);
    job = last_job_;
  }
  if (!job) return absl::OkStatus();
  std::optional<Status> s = job->WaitSnapshot(timeout);
  const double stall = Seconds(start);
  job->AddStall(stall);
  absl::MutexLock lock(&metrics_mu_);
  metrics_.stall_s += stall;
  metrics_.last_stall_s += stall;
  return s;
}

ClientMetrics CheckpointerImpl::Metrics() const {
  absl::MutexLock lock(&metrics_mu_);
  ClientMetrics m = metrics_;
  m.servers_down = servers_->size() - servers_->up();
  m.servers_cross_memory = servers_->cross_memory();
  m.staging_pool_bytes = staging_.size();
  m.staging_prefaulted_bytes = staging_prefaulted_.load();
  m.callers_waiting = shaping_->callers_waiting();
  const qos::CollectiveGateStats g = shaping_->GateStats();
  m.gate_learned = g.learned;
  m.gate_period_s = static_cast<double>(g.period_ns) * 1e-9;
  m.gate_models_learned = g.models_learned;
  m.gate_models_dropped = g.models_dropped;
  return m;
}

std::string CheckpointerImpl::MetricsAddress() const {
  return metrics_exporter_ ? metrics_exporter_->address() : std::string();
}

Status CheckpointerImpl::StartMetrics() {
  if (options_.metrics_listen.empty()) return absl::OkStatus();
  STAGGER_ASSIGN_OR_RETURN(
      metrics_exporter_,
      metrics::HttpExporter::Start(options_.metrics_listen, [this] {
        return RenderClientMetrics(Metrics(), options_.job, options_.rank);
      }));
  return absl::OkStatus();
}

void CheckpointerImpl::WaitAll() { WaitAll(absl::InfiniteDuration()); }

bool CheckpointerImpl::WaitForRoom(absl::Duration timeout) {
  absl::MutexLock lock(&save_mu_);
  // fail_when_busy: Save() does not wait, it fails; nothing to wait for.
  if (options_.fail_when_busy || HasRoom()) return true;
  shaping_->CallerWaits(true);
  const bool room = save_mu_.AwaitWithTimeout(
      absl::Condition(this, &CheckpointerImpl::HasRoom), timeout);
  shaping_->CallerWaits(false);
  return room;
}

bool CheckpointerImpl::WaitAll(absl::Duration timeout) {
  absl::MutexLock lock(&save_mu_);
  shaping_->CallerWaits(true);
  const bool idle = save_mu_.AwaitWithTimeout(
      absl::Condition(
          +[](int* n) { return *n == 0; }, &outstanding_),
      timeout);
  shaping_->CallerWaits(false);
  return idle;
}

Result<int64_t> CheckpointerImpl::Load(int64_t step) {
  static const std::atomic<bool> kNever{false};
  return Load(step, kNever);
}

Result<int64_t> CheckpointerImpl::Load(int64_t step,
                                       const std::atomic<bool>& cancel) {
  // The staging preparation waits until the load is done: it would fault
  // memory on the cores and the memory bus the load needs (it took a
  // quarter of a cold load's CPU). It is asked for again after, for the
  // saves of the training that usually follows a load.
  prep_.Settle();
  LoadPlanning planning;
  Result<int64_t> r = LoadTargets(step, cancel, &planning);
  if (!staging_.fixed()) prep_.Request(RegisteredStaging(), kPrepQuiet);
  absl::MutexLock lock(&metrics_mu_);
  metrics_.load_manifest_bytes += planning.manifest_bytes;
  metrics_.last_load_plan_s = planning.seconds;
  metrics_.last_load_manifests = planning.manifests;
  last_load_from_other_ranks_ = std::move(planning.from_other_ranks);
  if (r.ok()) {
    ++metrics_.loads;
    for (const auto& [name, reg] : tensors_) metrics_.bytes_loaded += reg.bytes;
  } else {
    ++metrics_.loads_failed;
  }
  return r;
}

std::map<std::string, uint32_t> CheckpointerImpl::LastLoadFromOtherRanks()
    const {
  absl::MutexLock lock(&metrics_mu_);
  return last_load_from_other_ranks_;
}

Result<int64_t> CheckpointerImpl::LoadTargets(int64_t step,
                                              const std::atomic<bool>& cancel,
                                              LoadPlanning* planning) {
  std::vector<LoadTarget> targets;
  std::list<std::vector<char>> bounce;  // host copies of CUDA tensors
  std::vector<std::pair<const TensorSpec*, const char*>> device_copies;
  for (const auto& [name, reg] : tensors_) {
    char* dest = static_cast<char*>(reg.spec.data);
    if (reg.spec.device == Device::kCuda) {
      // Device memory: decode into host memory, then copy it over.
      bounce.emplace_back(reg.bytes);
      device_copies.push_back({&reg.spec, bounce.back().data()});
      dest = bounce.back().data();
    }
    targets.push_back({name, reg.spec.dtype, reg.spec.shape,
                       reg.spec.global_shape, reg.spec.global_offset, dest});
  }
  STAGGER_ASSIGN_OR_RETURN(
      int64_t loaded,
      LoadStep(*servers_, io_, options_.job, options_.rank, options_.world_size,
               step, targets, &cancel, planning));
  for (const auto& [spec, host] : device_copies) {
    STAGGER_RETURN_IF_ERROR_CTX(
        CudaCopyToDevice(spec->device_index, spec->data, host, SizeOf(*spec)),
        "load of job '", options_.job, "' step ", loaded, " rank ",
        options_.rank, " tensor '", spec->name, "'");
  }
  return loaded;
}

void CheckpointerImpl::StepsAsync(
    bool include_partial,
    std::function<void(Result<std::vector<StepSummary>>)> done) {
  {
    absl::MutexLock lock(&async_mu_);
    ++async_calls_;  // before the thread exists: the destructor waits
  }
  std::thread([this, include_partial, done = std::move(done)] {
    done(Steps(include_partial));
    absl::MutexLock lock(&async_mu_);
    --async_calls_;
  }).detach();
}

Result<std::vector<StepSummary>> CheckpointerImpl::Steps(bool include_partial) {
  STAGGER_ASSIGN_OR_RETURN(auto steps,
                           ListSteps(*servers_, options_.job, include_partial));
  std::vector<StepSummary> out;
  for (const pb::StepInfo& s : steps) {
    StepSummary x;
    x.step = s.step();
    x.complete = s.complete();
    x.world_size = s.world_size();
    x.ranks_committed = s.committed_ranks_size();
    x.raw_bytes = s.raw_bytes();
    x.stored_bytes = s.stored_bytes();
    x.new_bytes = s.shipped_bytes();
    x.in_memory = !s.memory_ranks().empty();
    out.push_back(x);
  }
  return out;
}

Status CheckpointerImpl::WaitStep(int64_t step, absl::Duration timeout) {
  // No rank ever commits it: without a timeout the wait would never end.
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("wait for step ", step, ": steps are >= 0"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(20);
  Status last;
  std::optional<pb::StepInfo> seen;
  for (;;) {
    auto steps = ListSteps(*servers_, options_.job, /*include_partial=*/true);
    if (steps.ok()) {
      last = absl::OkStatus();
      for (const pb::StepInfo& s : *steps) {
        if (s.step() != step) continue;
        if (s.complete()) return absl::OkStatus();
        seen = s;
      }
    } else {
      last = steps.status();
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Seconds(1));
  }
  if (!last.ok()) {
    return WithContext(last, absl::StrCat("waiting for step ", step,
                                          " of job '", options_.job, "'"));
  }
  if (!seen.has_value()) {
    return absl::DeadlineExceededError(
        absl::StrCat("step ", step, " of job '", options_.job,
                     "': no rank has committed it"));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "step ", step, " of job '", options_.job,
      "' is still partial: ", seen->committed_ranks_size(), " of world size ",
      seen->world_size(), " committed; missing ", format::MissingRanks(*seen),
      " (a rank that did not save this step, or a world_size that is not "
      "the job's)"));
}

bool CheckpointerImpl::Stores(const Registered& reg) const {
  return options_.rank == 0 ||
         !IsReplicated(reg.spec.shape, reg.spec.global_shape);
}

uint64_t CheckpointerImpl::SizeOf(const TensorSpec& t) const {
  return tensors_.at(t.name).bytes;
}

SnapshotSource* CheckpointerImpl::SourceFor(const TensorSpec& t) {
  if (t.device == Device::kCuda) return cuda_sources_.at(t.device_index).get();
  return host_source_.get();
}

Result<SnapshotSource*> CheckpointerImpl::CudaSource(int device) {
  auto it = cuda_sources_.find(device);
  if (it != cuda_sources_.end()) return it->second.get();
  CudaSnapshotOptions co;
  co.device = device;
  co.device_snapshot = options_.device_snapshot;
  auto src = NewCudaSnapshotSource(co);
  if (absl::IsUnavailable(src.status())) {
    // No device visible to this process: the caller's setup, not a
    // transient peer failure.
    return absl::FailedPreconditionError(src.status().message());
  }
  STAGGER_RETURN_IF_ERROR(src.status());  // UNIMPLEMENTED without CUDA
  SnapshotSource* raw = src->get();
  cuda_sources_.emplace(device, std::move(*src));
  staging_.SetCuda(raw);
  return raw;
}

void CheckpointerImpl::CountFinished(const Status& status,
                                     const SaveStats& st) {
  absl::MutexLock lock(&metrics_mu_);
  ++metrics_.saves;
  if (!status.ok()) ++metrics_.saves_failed;
  metrics_.snapshot_s += st.snapshot_s;
  metrics_.durable_s += st.durable_s;
  metrics_.last_durable_s = st.durable_s;
  metrics_.bytes_raw += st.bytes_raw;
  metrics_.bytes_shipped += st.bytes_shipped;
  metrics_.chunks += st.chunks;
  metrics_.chunks_unchanged += st.chunks_unchanged;
  metrics_.yield_s += st.yield_s;
  if (st.late_s > 0) {
    ++metrics_.saves_late;
    metrics_.late_s += st.late_s;
  }
}

bool CheckpointerImpl::HasRoom() const {
  return outstanding_ < options_.max_outstanding_saves;
}

Result<std::shared_ptr<transport::Transport>> SharedUcxTransport() {
  static absl::Mutex mu;
  static std::weak_ptr<transport::Transport>* current =
      new std::weak_ptr<transport::Transport>();
  absl::MutexLock lock(&mu);
  if (auto t = current->lock()) return t;
  STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> t,
                           transport::NewUcxTransport());
  std::shared_ptr<transport::Transport> shared(std::move(t));
  *current = shared;
  return shared;
}

Result<std::unique_ptr<Checkpointer>> NewCheckpointer(
    const CheckpointerOptions& options, const std::string& servers,
    std::shared_ptr<transport::Transport> transport,
    std::shared_ptr<void> keepalive) {
  STAGGER_RETURN_IF_ERROR(ValidateOptions(options));
  if (!transport) {
    STAGGER_ASSIGN_OR_RETURN(transport, SharedUcxTransport());
  }
  STAGGER_ASSIGN_OR_RETURN(std::vector<std::string> listed,
                           ServerSet::ParseList(servers));
  if (options.replicas > listed.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas ", options.replicas, " exceeds the ",
                     listed.size(), " server(s) listed in '", servers, "'"));
  }
  std::string token = options.token;
  if (token.empty()) {
    const char* env = std::getenv("STAGGER_TOKEN");
    if (env != nullptr) token = env;
  }
  // With one copy, a server down at Open holds the only copy of its
  // chunks: refuse. With more, go on while one server answers: loads read
  // any copy, and a save checks that `replicas` servers are up.
  STAGGER_ASSIGN_OR_RETURN(
      auto set,
      ServerSet::Connect(servers, transport.get(), options.rpc_timeout_s,
                         options.tls_ca_file,
                         /*tolerate_down=*/options.replicas > 1, token));
  set->set_wait(absl::Seconds(options.server_wait_s));
  set->SetLocalNode(options.node.empty() ? ServerSet::DefaultNode()
                                         : options.node);
  STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<Shaping> shaping,
                           Shaping::Make(options, options.clock));
  std::unique_ptr<StagingPool> pool;
  if (options.staging_bytes != 0) {
    STAGGER_ASSIGN_OR_RETURN(
        pool, StagingPool::Create(options.staging_bytes, options.chunk_size));
  }
  auto ck = std::make_unique<CheckpointerImpl>(
      options, std::move(keepalive), std::move(transport), std::move(set),
      std::move(pool), std::move(shaping));
  STAGGER_RETURN_IF_ERROR(ck->StartMetrics());
  // The job's steps are listed here, at set-up, not in the first save's
  // stall (when this fails, the first save asks again).
  ck->PrimeStepGuard();
  return std::unique_ptr<Checkpointer>(std::move(ck));
}

}  // namespace client
}  // namespace stagger
