// ControlService::Commit and CommitShard (control_service.h): commits in
// groups, written by one committer thread. The commits that arrive while
// one group is being written wait, holding no thread, and go together in
// the next: one synced RocksDB batch and one synced append per
// job's manifest log for the whole group, instead of two syncs per rank
// one after another (bench_ranks: 2048 ranks committing at once took 10 s
// that way, mostly waiting in line for the syncs).
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "format/manifest.h"
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
  // Runs once `out` is final, on the committer thread (or in Enqueue when
  // stopping); the last use of this object by the service.
  std::function<void(PendingCommit*)> done;
};

Result<pb::StepInfo> ControlService::Commit(const pb::CommitShardRequest& req) {
  PendingCommit me{&req};
  absl::Notification committed;
  me.done = [&committed](PendingCommit*) { committed.Notify(); };
  Enqueue(&me);
  committed.WaitForNotification();
  return std::move(me.out);
}

grpc::ServerUnaryReactor* ControlService::CommitShard(
    grpc::CallbackServerContext* ctx, const pb::CommitShardRequest* req,
    pb::CommitShardReply* reply) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (Status a = Authorize(ctx, req->manifest().job()); !a.ok()) {
    reactor->Finish(ToGrpc(a));
    return reactor;
  }
  auto* p = new PendingCommit{req};
  p->done = [reactor, reply](PendingCommit* p) {
    grpc::ServerUnaryReactor* const finish = reactor;
    grpc::Status s = grpc::Status::OK;
    if (p->out.ok()) {
      *reply->mutable_step() = std::move(*p->out);
    } else {
      s = ToGrpc(p->out.status());
    }
    delete p;  // and this closure with it: only locals from here on
    finish->Finish(s);
  };
  Enqueue(p);
  return reactor;
}

void ControlService::Enqueue(PendingCommit* p) {
  {
    absl::MutexLock l(&group_mu_);
    if (!stopping_) {
      group_.push_back(p);
      return;
    }
  }
  p->out = absl::UnavailableError("server shutting down: commit not taken");
  p->done(p);
}

void ControlService::CommitLoop() {
  while (true) {
    std::vector<PendingCommit*> group;
    {
      absl::MutexLock l(&group_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(group_mu_) {
        return !group_.empty() || stopping_;
      };
      // Waking now and then to look at the partial steps.
      group_mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(1));
      if (group_.empty() && stopping_) return;  // nothing left
      const size_t n = std::min(group_.size(), kMaxCommitGroup);
      group.assign(group_.begin(), group_.begin() + n);
      group_.erase(group_.begin(), group_.begin() + n);
    }
    if (!group.empty()) {
      CommitGroup(group);
      for (PendingCommit* p : group) {
        AfterCommit(*p->req, p->logged, &p->out);
        p->done(p);
      }
    }
    WarnLongPartial();
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
  if (partial_warn_after_ > absl::ZeroDuration()) {
    if (step.complete()) {
      partial_.erase({m.job(), step.step()});
    } else {
      partial_.emplace(std::make_pair(m.job(), step.step()), absl::Now());
    }
  }
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
  if (step.complete() && compactor_ != nullptr) {
    compactor_->StepComplete(m.job());
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

void ControlService::WarnLongPartial() {
  const absl::Time now = absl::Now();
  for (auto it = partial_.begin(); it != partial_.end();) {
    if (now - it->second < partial_warn_after_) {
      ++it;
      continue;
    }
    const auto& [job, number] = it->first;
    // Collected or completed meanwhile: nothing to say.
    Result<pb::StepInfo> info = meta_->GetStep(job, number);
    if (info.ok() && !info->complete()) {
      log::Warning(
          "stagger-server",
          absl::StrCat(
              "job '", job, "' step ", number, " is still partial ",
              absl::FormatDuration(
                  absl::Trunc(now - it->second, absl::Seconds(1))),
              " after its first commit: ", info->committed_ranks_size(), " of ",
              info->world_size(), " ranks committed, missing ",
              format::MissingRanks(*info),
              " (a rank that did not save the step, or one started with "
              "another world_size); it is neither listed nor loaded until "
              "they commit, and 'stagger rm' deletes it"));
    }
    it = partial_.erase(it);
  }
}

}  // namespace stagger::server
