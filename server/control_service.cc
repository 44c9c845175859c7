#include "server/control_service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "format/names.h"
#include "format/record.h"
#include "server/promoter.h"
#include "server/tier/cold_gc.h"
#include "server/tier/drainer.h"
#include "util/log.h"

namespace stagger::server {

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

namespace {

// Longest a Gc or Sweep waits for its compaction pass.
constexpr std::chrono::minutes kMaxCompactionWait(5);
// Longest a Flush waits for chunks to be written behind.
constexpr std::chrono::minutes kMaxFlushWait(10);
// Chunk ids one Flush may name.
constexpr int kMaxFlushIds = 1 << 20;
// Left of the caller's deadline for the reply to get back.
constexpr std::chrono::seconds kReplyMargin(1);

// How long a call may wait for work it started: until its deadline less
// the reply's margin, at most `max`.
absl::Time WaitUntil(const grpc::ServerContext* ctx, std::chrono::minutes max) {
  // time_point::max() (no deadline) minus now does not overflow.
  auto budget = ctx->deadline() - std::chrono::system_clock::now();
  if (budget > max + kReplyMargin) budget = max + kReplyMargin;
  budget -= kReplyMargin;
  return absl::Now() + absl::FromChrono(budget);
}

}  // namespace

ControlService::ControlService(MetaStore* meta, std::string data_address,
                               std::string server_id, RetentionPolicy retention,
                               Compactor* compactor, Authorizer* auth,
                               ManifestLog* log, SegmentStore* segments)
    : meta_(meta),
      compactor_(compactor),
      auth_(auth),
      log_(log),
      segments_(segments),
      data_address_(std::move(data_address)),
      server_id_(std::move(server_id)),
      instance_(
          std::random_device()() * uint64_t{0x100000001} ^
          static_cast<uint64_t>(
              std::chrono::steady_clock::now().time_since_epoch().count())),
      retention_(retention) {
  committer_ = std::thread([this] { CommitLoop(); });
}

ControlService::~ControlService() {
  {
    absl::MutexLock l(&group_mu_);
    stopping_ = true;
  }
  committer_.join();
}

Result<const Grant*> ControlService::Caller(
    const grpc::ServerContextBase* ctx) const {
  if (auth_ == nullptr) return nullptr;
  const auto& md = ctx->client_metadata();
  auto it = md.find(kTokenMetadataKey);
  std::string_view token;
  if (it != md.end())
    token = std::string_view(it->second.data(), it->second.size());
  return auth_->Check(token);
}

Status ControlService::Authorize(const grpc::ServerContextBase* ctx,
                                 const std::string& job) const {
  STAGGER_ASSIGN_OR_RETURN(const Grant* grant, Caller(ctx));
  if (grant == nullptr) return absl::OkStatus();
  return Authorizer::CheckJob(*grant, job);
}

grpc::Status ControlService::Hello(grpc::ServerContext* ctx,
                                   const pb::HelloRequest*,
                                   pb::HelloReply* reply) {
  auto grant = Caller(ctx);
  if (!grant.ok()) return ToGrpc(grant.status());
  if (*grant != nullptr) reply->set_data_key(auth_->MintDataKey(*grant));
  reply->set_data_address(data_address_);
  reply->set_format_version(format::kFormatVersion);
  reply->set_codec_count(format::kCodecCount);
  reply->set_rebases_deltas(rebaser_ != nullptr);
  reply->set_serves_ranges(true);
  reply->set_takes_size_hints(true);
  reply->set_takes_previous(rebaser_ != nullptr);
  reply->set_domain(domain_);
  reply->set_node(node_);
  if (memory_ != nullptr) reply->set_memory_bytes(memory_->limit_bytes());
  reply->set_instance(instance_);
  reply->set_server_id(server_id_);
  return grpc::Status::OK;
}

void ControlService::RewriteLog(const std::string& job) {
  if (log_ == nullptr) return;
  std::vector<pb::ShardManifest> kept;
  Status s;
  auto steps = meta_->ListSteps(job, /*include_partial=*/true);
  s = steps.status();
  for (size_t i = 0; s.ok() && i < steps->size(); ++i) {
    for (uint32_t rank : (*steps)[i].committed_ranks()) {
      auto m = meta_->GetShard(job, (*steps)[i].step(), rank);
      if (!m.ok()) {
        s = m.status();
        break;
      }
      kept.push_back(std::move(*m));
    }
  }
  if (s.ok()) s = log_->Rewrite(job, kept);
  if (!s.ok()) {
    ++counters_.manifest_log_failures;
    log::Error("stagger-server", absl::StrCat("manifest log of job '", job,
                                              "' after gc: ", s.message()));
  }
}

grpc::Status ControlService::GetStep(grpc::ServerContext* ctx,
                                     const pb::GetStepRequest* req,
                                     pb::GetStepReply* reply) {
  Status valid = format::ValidateName("job", req->job());
  if (valid.ok()) valid = Authorize(ctx, req->job());
  if (!valid.ok()) return ToGrpc(valid);
  auto info = req->latest() ? meta_->LatestComplete(req->job())
                            : meta_->GetStep(req->job(), req->step());
  if (!info.ok()) return ToGrpc(info.status());
  if (!req->regions().empty() && !req->all_ranks() && req->ranks().empty()) {
    Status s = ShardsOfRegions(*req, *info, reply);
    if (!s.ok()) return ToGrpc(s);
    *reply->mutable_step() = *info;
    // Complete: every rank committed. Left out, the reply stays the size
    // of the slices asked for, whatever the world size.
    reply->mutable_step()->clear_committed_ranks();
    return grpc::Status::OK;
  }
  std::vector<uint32_t> ranks;
  if (req->all_ranks()) {
    ranks.assign(info->committed_ranks().begin(),
                 info->committed_ranks().end());
  } else {
    ranks.assign(req->ranks().begin(), req->ranks().end());
  }
  for (uint32_t r : ranks) {
    if (r >= info->world_size()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, " out of range for world size ", info->world_size())));
    }
    auto shard = meta_->GetShard(req->job(), info->step(), r);
    if (!shard.ok()) return ToGrpc(shard.status());
    *reply->add_shards() = std::move(*shard);
  }
  *reply->mutable_step() = *info;
  return grpc::Status::OK;
}

Status ControlService::ShardsOfRegions(const pb::GetStepRequest& req,
                                       const pb::StepInfo& info,
                                       pb::GetStepReply* reply) {
  if (req.regions_size() > kMaxRegions) {
    return absl::InvalidArgumentError(absl::StrCat(
        req.regions_size(), " regions in one GetStep; at most ", kMaxRegions));
  }
  for (const pb::TensorRegion& r : req.regions()) {
    STAGGER_RETURN_IF_ERROR(format::ValidateName("tensor", r.name()));
    if (r.offset_size() != r.shape_size() || r.shape_size() > 32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "region of tensor '", r.name(), "': ", r.offset_size(),
          " offsets for ", r.shape_size(), " dimensions (at most 32)"));
    }
    for (int d = 0; d < r.shape_size(); ++d) {
      // Bounded so that offset + shape cannot overflow.
      constexpr int64_t kMax = int64_t{1} << 62;
      if (r.offset(d) < 0 || r.shape(d) < 0 || r.offset(d) > kMax ||
          r.shape(d) > kMax) {
        return absl::InvalidArgumentError(absl::StrCat(
            "region of tensor '", r.name(), "': dimension ", d, " has offset ",
            r.offset(d), " and size ", r.shape(d), " (each from 0 to 2^62)"));
      }
    }
  }
  const std::string& job = req.job();
  const int64_t step = info.step();
  STAGGER_ASSIGN_OR_RETURN(
      auto found, slices_.Find(job, info, req.regions(), req.prefer_rank(),
                               [&](uint32_t rank) {
                                 return meta_->GetShard(job, step, rank);
                               }));
  for (const auto& [rank, names] : found) {
    STAGGER_ASSIGN_OR_RETURN(pb::ShardManifest m,
                             meta_->GetShard(job, step, rank));
    auto* tensors = m.mutable_tensors();
    tensors->erase(std::remove_if(tensors->begin(), tensors->end(),
                                  [&names = names](const pb::TensorEntry& t) {
                                    return names.count(t.name()) == 0;
                                  }),
                   tensors->end());
    *reply->add_shards() = std::move(m);
  }
  return absl::OkStatus();
}

grpc::Status ControlService::ListSteps(grpc::ServerContext* ctx,
                                       const pb::ListStepsRequest* req,
                                       pb::ListStepsReply* reply) {
  Status valid = format::ValidateName("job", req->job());
  if (valid.ok()) valid = Authorize(ctx, req->job());
  if (!valid.ok()) return ToGrpc(valid);
  auto steps = meta_->ListSteps(req->job(), req->include_partial());
  if (!steps.ok()) return ToGrpc(steps.status());
  auto drained = meta_->DrainedSteps(req->job());
  if (!drained.ok()) return ToGrpc(drained.status());
  auto cold_only = meta_->ColdOnlySteps(req->job());
  if (!cold_only.ok()) return ToGrpc(cold_only.status());
  for (auto& s : *steps) {
    pb::StepTiers* t = reply->add_tiers();
    t->set_memory(!s.memory_ranks().empty());
    t->set_disk(cold_only->count(s.step()) == 0 && !t->memory());
    t->set_rados(drained->count(s.step()) != 0);
    *reply->add_steps() = std::move(s);
  }
  if (segments_ != nullptr) {
    auto files = segments_->ListSegments(req->job());
    if (!files.ok()) return ToGrpc(files.status());
    uint64_t bytes = 0;
    for (const SegmentInfo& f : *files) bytes += f.size;
    reply->set_job_disk_bytes(bytes);
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::ListJobs(grpc::ServerContext* ctx,
                                      const pb::ListJobsRequest*,
                                      pb::ListJobsReply* reply) {
  auto grant = Caller(ctx);
  if (!grant.ok()) return ToGrpc(grant.status());
  auto jobs = meta_->ListJobs();
  if (!jobs.ok()) return ToGrpc(jobs.status());
  for (const std::string& job : *jobs) {
    if (*grant != nullptr && !(*grant)->Allows(job)) continue;
    auto steps = meta_->ListSteps(job, /*include_partial=*/true);
    if (!steps.ok()) return ToGrpc(steps.status());
    pb::JobInfo* info = reply->add_jobs();
    info->set_job(job);
    info->set_latest_complete(-1);
    for (const pb::StepInfo& s : *steps) {
      if (s.complete()) {
        info->set_steps_complete(info->steps_complete() + 1);
        info->set_latest_complete(s.step());
      } else {
        info->set_steps_partial(info->steps_partial() + 1);
      }
    }
    auto files = segments_->ListSegments(job);
    if (!files.ok()) return ToGrpc(files.status());
    uint64_t bytes = 0;
    for (const SegmentInfo& f : *files) bytes += f.size;
    info->set_disk_bytes(bytes);
  }
  return grpc::Status::OK;
}

namespace {

// A grace in whole seconds for the durable tier (its clock is whole
// seconds), rounded up: a part of a second still spares.
int64_t GraceSeconds(int64_t grace_ms) { return (grace_ms + 999) / 1000; }

void SetGraceKept(const GraceKept& g, pb::GraceKept* out) {
  out->set_chunks(g.chunks);
  out->set_bytes(g.bytes);
  out->set_until_unix_ms(g.until_unix_ms);
}

}  // namespace

grpc::Status ControlService::Gc(grpc::ServerContext* ctx,
                                const pb::GcRequest* req, pb::GcReply* reply) {
  if (Status a = Authorize(ctx, req->job()); !a.ok()) return ToGrpc(a);
  if (req->grace_ms() < 0) {
    return ToGrpc(absl::InvalidArgumentError("grace must be >= 0"));
  }
  tier::Drainer::DeletionScope deleting(drainer_);
  auto r =
      meta_->Gc(req->job(), req->keep(), req->grace_ms(), drainer_ != nullptr);
  if (!r.ok()) return ToGrpc(r.status());
  FillGcReply(ctx, req->job(), *r, req->wait_for_compaction(), reply);
  if (req->keep_cold() || req->keep() == 0) return grpc::Status::OK;
  CollectCold(
      [&](tier::ObjectStore* store) {
        return tier::GcColdJob(store, req->job(), req->keep(),
                               GraceSeconds(req->grace_ms()),
                               absl::ToUnixSeconds(absl::Now()));
      },
      reply);
  return grpc::Status::OK;
}

void ControlService::CollectCold(
    const std::function<Result<tier::ColdGcResult>(tier::ObjectStore*)>&
        collect,
    pb::GcReply* reply) {
  // After the disk: its copies are gone first, so a step is never left on
  // the disk with its cold copy deleted.
  if (drainer_ == nullptr) return;
  tier::ObjectStore* store = drainer_->store();
  pb::ColdCollected* c = reply->mutable_cold();
  c->set_store(store->Describe());
  auto cold = collect(store);
  if (!cold.ok()) {
    c->set_error(cold.status().ToString());
    log::Error("stagger-server", absl::StrCat("collecting ", store->Describe(),
                                              ": ", cold.status().ToString()));
    return;
  }
  for (int64_t s : cold->steps_deleted) c->add_steps_deleted(s);
  c->set_chunks_deleted(cold->chunks_deleted);
  c->set_bytes_freed(cold->bytes_freed);
  c->set_grace_kept(cold->grace_kept);
}

grpc::Status ControlService::DeleteSteps(grpc::ServerContext* ctx,
                                         const pb::DeleteStepsRequest* req,
                                         pb::GcReply* reply) {
  if (Status a = Authorize(ctx, req->job()); !a.ok()) return ToGrpc(a);
  if (req->steps_size() > kMaxStepsPerDelete) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("delete steps: at most ", kMaxStepsPerDelete,
                     " steps a call, got ", req->steps_size())));
  }
  std::vector<int64_t> steps(req->steps().begin(), req->steps().end());
  tier::Drainer::DeletionScope deleting(drainer_);
  auto r = meta_->DeleteSteps(req->job(), steps, req->all(), req->grace_ms());
  if (!r.ok()) return ToGrpc(r.status());
  FillGcReply(ctx, req->job(), *r, req->wait_for_compaction(), reply);
  if (req->keep_cold()) return grpc::Status::OK;
  CollectCold(
      [&](tier::ObjectStore* store) {
        return tier::RemoveColdSteps(store, req->job(), steps, req->all(),
                                     GraceSeconds(req->grace_ms()),
                                     absl::ToUnixSeconds(absl::Now()));
      },
      reply);
  return grpc::Status::OK;
}

void ControlService::FillGcReply(grpc::ServerContext* ctx,
                                 const std::string& job, const GcResult& r,
                                 bool wait, pb::GcReply* reply) {
  if (!r.steps_deleted.empty()) RewriteLog(job);
  for (int64_t s : r.steps_deleted) reply->add_steps_deleted(s);
  reply->set_steps_kept(r.steps_kept);
  reply->set_chunks_deleted(r.chunks_deleted);
  reply->set_bytes_freed(r.bytes_freed);
  SetGraceKept(r.grace_kept, reply->mutable_grace_kept());
  Compact(ctx, job, wait ? reply->mutable_compaction() : nullptr);
}

void ControlService::Compact(grpc::ServerContext* ctx, const std::string& job,
                             pb::CompactionReport* report) {
  if (compactor_ == nullptr) return;
  auto ticket = compactor_->Schedule(job);
  if (report == nullptr) return;
  auto r = ticket->Wait(WaitUntil(ctx, kMaxCompactionWait));
  if (absl::IsDeadlineExceeded(r.status())) {
    report->set_pending(true);
  } else if (!r.ok()) {
    report->set_error(r.status().ToString());
  } else {
    report->set_segments_removed(r->segments_removed);
    report->set_bytes_copied(r->bytes_copied);
    report->set_bytes_reclaimed(r->bytes_reclaimed);
  }
}

grpc::Status ControlService::LiveChunks(
    grpc::ServerContext* ctx, const pb::LiveChunksRequest* req,
    grpc::ServerWriter<pb::LiveChunksReply>* writer) {
  Status valid = format::ValidateName("job", req->job());
  if (valid.ok()) valid = Authorize(ctx, req->job());
  if (!valid.ok()) return ToGrpc(valid);
  auto live = meta_->LiveChunks(req->job());
  if (!live.ok()) return ToGrpc(live.status());
  pb::LiveChunksReply batch;
  for (const format::ChunkId& id : *live) {
    batch.add_ids(id.ToBytes());
    if (batch.ids_size() == kLiveIdsPerMessage) {
      if (!writer->Write(batch)) {
        return ToGrpc(absl::CancelledError("live chunks: the client left"));
      }
      batch.Clear();
    }
  }
  if (batch.ids_size() > 0 && !writer->Write(batch)) {
    return ToGrpc(absl::CancelledError("live chunks: the client left"));
  }
  return grpc::Status::OK;
}

namespace {

// The live set of a sweep as its stream of messages builds it, each
// message checked as it comes (job, grace and waiting in the first only,
// ids bounded per message and in all, the total in the last).
class SweepStream {
 public:
  explicit SweepStream(std::function<Status(const std::string&)> authorize)
      : authorize_(std::move(authorize)) {}

  // INVALID_ARGUMENT naming the message and what is wrong with it, or the
  // first message's job refused.
  Status Take(const pb::SweepRequest& msg) {
    ++messages_;
    if (last_) return Bad("follows the last message");
    if (messages_ == 1) {
      STAGGER_RETURN_IF_ERROR(format::ValidateName("job", msg.job()));
      STAGGER_RETURN_IF_ERROR(authorize_(msg.job()));
      if (msg.grace_ms() < 0) return Bad("grace_ms must be >= 0");
      job_ = msg.job();
      grace_ms_ = msg.grace_ms();
      wait_ = msg.wait_for_compaction();
    } else if (!msg.job().empty() || msg.grace_ms() != 0 ||
               msg.wait_for_compaction()) {
      return Bad("job, grace_ms and wait_for_compaction go in the first only");
    }
    STAGGER_RETURN_IF_ERROR(TakeIds(msg));
    if (msg.last()) {
      last_ = true;
      if (msg.total_ids() != received_) {
        return Bad(absl::StrCat("says ", msg.total_ids(), " ids in all; ",
                                received_, " arrived"));
      }
    } else if (msg.total_ids() != 0) {
      return Bad("total_ids goes in the last message only");
    }
    return absl::OkStatus();
  }

  // After the stream: INVALID_ARGUMENT for no message, ABORTED when the
  // last one never came (nothing is deleted then).
  Status Complete() const {
    if (messages_ == 0) return absl::InvalidArgumentError("sweep: no message");
    if (!last_) {
      return absl::AbortedError(
          absl::StrCat("sweep of job '", job_, "' ended after ", received_,
                       " ids without its last message; nothing deleted"));
    }
    return absl::OkStatus();
  }

  const std::string& job() const { return job_; }
  int64_t grace_ms() const { return grace_ms_; }
  bool wait() const { return wait_; }
  ChunkIdSet TakeLive() { return std::move(live_); }

 private:
  Status Bad(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("sweep message ", messages_, ": ", what));
  }
  Status TakeIds(const pb::SweepRequest& msg) {
    if (msg.live_ids_size() > kMaxSweepIdsPerMessage) {
      return Bad(absl::StrCat(msg.live_ids_size(), " ids; at most ",
                              kMaxSweepIdsPerMessage, " per message"));
    }
    if (received_ + msg.live_ids_size() > kMaxSweepIds) {
      return Bad(absl::StrCat("more than ", kMaxSweepIds, " ids in all"));
    }
    for (int i = 0; i < msg.live_ids_size(); ++i) {
      auto id = format::ChunkId::FromBytes(msg.live_ids(i));
      if (!id.ok()) {
        return Bad(absl::StrCat("id ", i, " is ", msg.live_ids(i).size(),
                                " bytes, not 16"));
      }
      live_.insert(*id);
    }
    received_ += msg.live_ids_size();
    return absl::OkStatus();
  }

  std::function<Status(const std::string&)> authorize_;
  std::string job_;
  int64_t grace_ms_ = 0;
  bool wait_ = false;
  bool last_ = false;
  uint64_t messages_ = 0;
  uint64_t received_ = 0;
  ChunkIdSet live_;
};

}  // namespace

grpc::Status ControlService::Sweep(grpc::ServerContext* ctx,
                                   grpc::ServerReader<pb::SweepRequest>* reader,
                                   pb::SweepReply* reply) {
  SweepStream stream(
      [this, ctx](const std::string& job) { return Authorize(ctx, job); });
  pb::SweepRequest msg;
  while (reader->Read(&msg)) {
    if (Status s = stream.Take(msg); !s.ok()) return ToGrpc(s);
  }
  if (Status s = stream.Complete(); !s.ok()) return ToGrpc(s);
  const std::string job = stream.job();
  auto r = meta_->Sweep(job, stream.TakeLive(), stream.grace_ms());
  if (!r.ok()) {
    return ToGrpc(
        WithContext(r.status(), absl::StrCat("sweep of job '", job, "'")));
  }
  reply->set_chunks_deleted(r->chunks_deleted);
  reply->set_bytes_freed(r->bytes_freed);
  SetGraceKept(r->grace_kept, reply->mutable_grace_kept());
  Compact(ctx, job, stream.wait() ? reply->mutable_compaction() : nullptr);
  return grpc::Status::OK;
}

grpc::Status ControlService::Flush(grpc::ServerContext* ctx,
                                   const pb::FlushRequest* req,
                                   pb::FlushReply* reply) {
  Status valid = format::ValidateName("job", req->job());
  if (valid.ok()) valid = Authorize(ctx, req->job());
  if (!valid.ok()) return ToGrpc(valid);
  if (req->ids_size() > kMaxFlushIds) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("flush of job '", req->job(), "': ", req->ids_size(),
                     " chunk ids, more than ", kMaxFlushIds)));
  }
  std::vector<format::ChunkId> ids;
  ids.reserve(req->ids_size());
  for (int i = 0; i < req->ids_size(); ++i) {
    auto id = format::ChunkId::FromBytes(req->ids(i));
    if (!id.ok()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "flush of job '", req->job(), "': id ", i, " is not 16 bytes")));
    }
    ids.push_back(*id);
  }
  if (memory_ != nullptr) {
    // In slices: a caller that went away (a killed trainer) or a server
    // shutting down (it cancels the calls in flight, then waits for their
    // handlers) ends the wait within one.
    const absl::Time deadline = WaitUntil(ctx, kMaxFlushWait);
    Status s;
    for (;;) {
      s = memory_->WaitWritten(
          req->job(), ids,
          std::min(deadline, absl::Now() + absl::Milliseconds(200)));
      if (!absl::IsDeadlineExceeded(s) || absl::Now() >= deadline) break;
      if (ctx->IsCancelled()) {
        return grpc::Status(grpc::StatusCode::CANCELLED,
                            "flush: the call was cancelled");
      }
    }
    if (!s.ok()) {
      return ToGrpc(WithContext(s, absl::StrCat("server ", server_id_)));
    }
    const MemoryTier::Stats st = memory_->stats();
    auto it = st.jobs.find(req->job());
    if (it != st.jobs.end()) {
      reply->set_memory_only_bytes(it->second.memory_only_bytes);
    }
  }
  std::string bits((ids.size() + 7) / 8, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (meta_->GetChunk(req->job(), ids[i]).ok() &&
        !meta_->IsMarkedBad(req->job(), ids[i])) {
      bits[i / 8] = static_cast<char>(bits[i / 8] | (1 << (i % 8)));
    }
  }
  reply->set_on_disk(std::move(bits));
  return grpc::Status::OK;
}

}  // namespace stagger::server
