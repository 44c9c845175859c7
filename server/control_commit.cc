// ControlService::Commit (control_service.h): commits in groups. The
// commits that arrive while one group is being written wait and go
// together in the next: one synced RocksDB batch and one synced append per
// job's manifest log for the whole group, instead of two syncs per rank
// one after another (bench_ranks: 2048 ranks committing at once took 10 s
// that way, mostly waiting in line for the syncs).
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/compactor.h"
#include "server/control_service.h"
#include "server/manifest_log.h"
#include "server/memory_tier.h"
#include "server/promoter.h"
#include "server/tier/drainer.h"
#include "util/log.h"

namespace stagger::server {

struct ControlService::PendingCommit {
  const pb::CommitShardRequest* req;
  Result<pb::StepInfo> out = absl::UnknownError("not committed");
  Status logged;  // its manifest log append (disk-level commits)
  bool done = false;
};

Result<pb::StepInfo> ControlService::Commit(const pb::CommitShardRequest& req) {
  PendingCommit me{&req};
  bool lead = false;
  {
    absl::MutexLock l(&group_mu_);
    group_.push_back(&me);
    auto ready = [this, &me]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(group_mu_) {
      return me.done || !group_leader_;
    };
    group_mu_.Await(absl::Condition(&ready));
    if (!me.done) lead = group_leader_ = true;
  }
  if (lead) LeadGroups(&me);
  AfterCommit(req, me.logged, &me.out);
  return std::move(me.out);
}

void ControlService::LeadGroups(PendingCommit* me) {
  while (true) {
    std::vector<PendingCommit*> group;
    {
      absl::MutexLock l(&group_mu_);
      if (me->done) {
        group_leader_ = false;
        return;
      }
      const size_t n = std::min(group_.size(), kMaxCommitGroup);
      group.assign(group_.begin(), group_.begin() + n);
      group_.erase(group_.begin(), group_.begin() + n);
    }
    CommitGroup(group);
    absl::MutexLock l(&group_mu_);
    for (PendingCommit* p : group) p->done = true;
  }
}

void ControlService::CommitGroup(const std::vector<PendingCommit*>& group) {
  MetaStore::HeldLookup held;
  if (memory_ != nullptr) {
    held = [this](const std::string& job,
                  const format::ChunkId& id) -> std::optional<ChunkMeta> {
      std::optional<MemoryTier::Record> rec = memory_->Peek(job, id);
      if (!rec) return std::nullopt;
      ChunkMeta m;
      m.raw_length = rec->header.raw_length;
      m.stored_length = rec->header.encoded_length;
      m.codec = rec->header.codec;
      m.base = rec->base;
      return m;
    };
  }
  std::vector<MetaStore::CommitArgs> args(group.size());
  // Where each memory-level shard's copies are, for the promoter.
  std::vector<pb::MemoryShard> plans(group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    const pb::CommitShardRequest& req = *group[i]->req;
    *plans[i].mutable_servers() = req.copy_servers();
    plans[i].set_replicas(std::max<uint32_t>(1, req.replicas()));
    args[i].manifest = req.manifest();
    args[i].chunks_elsewhere = req.chunks_elsewhere();
    args[i].held = held;
    args[i].plan = &plans[i];
  }
  std::vector<Result<pb::StepInfo>> results = meta_->CommitShards(args);
  // A memory-level shard is logged once it is disk-level (its commit
  // again without in_memory): a rebuild must not bring back a step whose
  // chunks a crash may have taken.
  std::vector<const pb::ShardManifest*> to_log;
  for (size_t i = 0; i < group.size(); ++i) {
    group[i]->out = std::move(results[i]);
    const pb::ShardManifest& m = group[i]->req->manifest();
    if (group[i]->out.ok() && !m.in_memory()) to_log.push_back(&m);
  }
  if (log_ == nullptr || to_log.empty()) return;
  const Status logged = log_->AppendAll(to_log);
  for (PendingCommit* p : group) {
    if (p->out.ok() && !p->req->manifest().in_memory()) p->logged = logged;
  }
}

void ControlService::AfterCommit(const pb::CommitShardRequest& req,
                                 const Status& logged,
                                 Result<pb::StepInfo>* info) {
  const pb::ShardManifest& m = req.manifest();
  if (!info->ok()) {
    ++counters_.failed_commits;
    *info = WithContext(info->status(),
                        absl::StrCat("commit of job '", m.job(), "' step ",
                                     m.step(), " rank ", m.rank()));
    return;
  }
  ++counters_.shard_commits;
  // The commit stands in RocksDB either way; without its log entry only a
  // rebuild of the index would miss it.
  if (!logged.ok()) {
    ++counters_.manifest_log_failures;
    log::Error("stagger-server", absl::StrCat("manifest log of job '", m.job(),
                                              "': ", logged.message()));
  }
  log::Debug(
      "stagger-server",
      absl::StrCat("job '", m.job(), "' step ", m.step(), ": rank ", m.rank(),
                   " committed", m.in_memory() ? " (memory)" : ""));
  const pb::StepInfo& step = **info;
  if (step.complete()) {
    ++counters_.steps_completed;
    if (drainer_ != nullptr) drainer_->Notify();
    log::Info(
        "stagger-server",
        absl::StrCat("job '", m.job(), "' step ", step.step(), " complete",
                     step.memory_ranks().empty() ? "" : " in memory", ": ",
                     step.world_size(),
                     step.world_size() == 1 ? " rank, " : " ranks, ",
                     step.raw_bytes(), " bytes"));
  }
  if (step.complete() && retention_.keep_last > 0) {
    auto gc = meta_->Gc(m.job(), retention_.keep_last, retention_.grace_ms,
                        drainer_ != nullptr);
    if (!gc.ok()) {
      log::Error("stagger-server",
                 absl::StrCat("retention gc of job '", m.job(),
                              "': ", gc.status().message()));
    } else {
      RewriteLog(m.job());
      if (compactor_ != nullptr) compactor_->Schedule(m.job());
    }
  }
  if (m.in_memory() && promoter_ != nullptr) promoter_->Notify();
}

}  // namespace stagger::server
