// ControlService: the gRPC control plane (proto/stagger.proto). Every
// request is validated here before it reaches the MetaStore; statuses map
// one-to-one onto gRPC codes, so clients see the same code and message.
//
// Thread-safety: called concurrently by gRPC's threads; all state is in the
// thread-safe MetaStore and Compactor.
#ifndef STAGGER_SERVER_CONTROL_SERVICE_H_
#define STAGGER_SERVER_CONTROL_SERVICE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/stagger.grpc.pb.h"
#include "server/auth.h"
#include "server/compactor.h"
#include "server/manifest_log.h"
#include "server/memory_tier.h"
#include "server/meta_store.h"
#include "server/rebaser.h"
#include "server/slice_index.h"
#include "server/tier/cold_gc.h"

namespace stagger::server {

class DataService;
class Promoter;

namespace tier {
class Drainer;
}

// absl::Status <-> grpc::Status with the same code and message.
grpc::Status ToGrpc(const Status& s);

// Sweep limits (docs/format.md): live ids per message and per sweep.
inline constexpr int kMaxSweepIdsPerMessage = 1 << 16;
inline constexpr uint64_t kMaxSweepIds = 1ull << 25;
// LiveChunks replies carry this many ids per message (about 600 KB).
inline constexpr int kLiveIdsPerMessage = 1 << 15;
// DeleteSteps names at most this many steps a call.
inline constexpr int kMaxStepsPerDelete = 1 << 16;

struct RetentionPolicy {
  uint32_t keep_last = 0;  // 0: keep every step
  int64_t grace_ms = 600 * 1000;
};

struct ControlCounters {
  std::atomic<uint64_t> shard_commits{0};    // accepted CommitShard calls
  std::atomic<uint64_t> steps_completed{0};  // commits that completed a step
  std::atomic<uint64_t> failed_commits{0};
  // Commits or gcs whose manifest log could not be written (the commit
  // stands; only a rebuild of the index would miss it).
  std::atomic<uint64_t> manifest_log_failures{0};
};

// CommitShard is served asynchronously (gRPC's callback API): a commit
// waiting for its group holds no control thread, so a storm of commits
// does not leave the other calls answered busy. The other methods run on
// the control threads (stagger-server --control-threads).
class ControlService final
    : public pb::Stagger::WithCallbackMethod_CommitShard<pb::Stagger::Service> {
 public:
  // `meta` and `compactor` are not owned; `compactor` may be null
  // (compaction off). `data_address` is returned by Hello. With a
  // retention policy, the commit that completes a step then collects the
  // job's old steps (before replying; a failed collection is logged and
  // does not fail the commit). Every Gc and Sweep schedules a compaction
  // pass over its job.
  // With a `log` (not owned), every manifest committed is also appended to
  // it, and a job's log is rewritten after each gc that deleted steps.
  // With an `auth` (not owned), every call must carry a token whose grant
  // allows its job (server/auth.h); Hello then also returns a data-plane
  // key bound to that grant.
  ControlService(MetaStore* meta, std::string data_address,
                 std::string server_id, RetentionPolicy retention = {},
                 Compactor* compactor = nullptr, Authorizer* auth = nullptr,
                 ManifestLog* log = nullptr, SegmentStore* segments = nullptr);
  // Commits what is queued, then stops the committer thread.
  ~ControlService() override;

  // With a rebaser (not owned; before serving): Hello tells clients that
  // this server rebases deltas (server/rebaser.h), so they need not cut
  // their delta chains.
  void SetRebaser(Rebaser* rebaser) { rebaser_ = rebaser; }
  // Hello tells clients this server's failure domain (before serving).
  void SetDomain(std::string domain) { domain_ = std::move(domain); }
  // Hello tells clients the node this server runs on (before serving).
  void SetNode(std::string node) { node_ = std::move(node); }
  // With a drainer (not owned; before serving): a completed step wakes it,
  // and gc (retention and `stagger gc`) spares complete steps it has not
  // copied to the cold store yet.
  void SetDrainer(tier::Drainer* drainer) { drainer_ = drainer; }
  // With a memory tier (not owned; before serving): Hello says its size,
  // a memory-level commit finds chunks held there, and Flush waits for
  // them to reach the disk.
  void SetMemoryTier(MemoryTier* memory) { memory_ = memory; }
  // With the data service (not owned): StoreRecords stores through it.
  void SetDataService(DataService* data) { data_ = data; }
  // With a promoter (not owned): a memory-level commit wakes it.
  void SetPromoter(Promoter* promoter) { promoter_ = promoter; }
  // A step a commit left partial and still partial `after` its first
  // commit here is logged once, naming the ranks missing (a rank that did
  // not save it, or one started with another world_size): nothing else
  // says so while the job goes on. Zero: never (before serving; 10 min
  // by default).
  void SetPartialWarning(absl::Duration after) { partial_warn_after_ = after; }

  // CommitShard without the call: commits the shard in the meta store,
  // logs it, wakes the drainer, applies retention. The promoter commits
  // the shards it confirmed on disk with it. Commits that come together
  // are written together by one committer thread (control_commit.cc): one
  // synced batch and one log sync per group.
  Result<pb::StepInfo> Commit(const pb::CommitShardRequest& req);
  // The most commits one group takes.
  static constexpr size_t kMaxCommitGroup = 512;

  grpc::Status Hello(grpc::ServerContext*, const pb::HelloRequest*,
                     pb::HelloReply*) override;
  grpc::ServerUnaryReactor* CommitShard(grpc::CallbackServerContext* ctx,
                                        const pb::CommitShardRequest* req,
                                        pb::CommitShardReply* reply) override;
  grpc::Status GetStep(grpc::ServerContext*, const pb::GetStepRequest*,
                       pb::GetStepReply*) override;
  grpc::Status ListSteps(grpc::ServerContext*, const pb::ListStepsRequest*,
                         pb::ListStepsReply*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const pb::ListJobsRequest*,
                        pb::ListJobsReply*) override;
  grpc::Status Gc(grpc::ServerContext*, const pb::GcRequest*,
                  pb::GcReply*) override;
  grpc::Status DeleteSteps(grpc::ServerContext*, const pb::DeleteStepsRequest*,
                           pb::GcReply*) override;
  grpc::Status LiveChunks(
      grpc::ServerContext*, const pb::LiveChunksRequest*,
      grpc::ServerWriter<pb::LiveChunksReply>* writer) override;
  grpc::Status Sweep(grpc::ServerContext*,
                     grpc::ServerReader<pb::SweepRequest>* reader,
                     pb::SweepReply* reply) override;
  grpc::Status Flush(grpc::ServerContext*, const pb::FlushRequest*,
                     pb::FlushReply*) override;
  grpc::Status ReadRecords(grpc::ServerContext*, const pb::ReadRecordsRequest*,
                           grpc::ServerWriter<pb::ChunkRecord>*) override;
  grpc::Status StoreRecords(grpc::ServerContext*,
                            grpc::ServerReader<pb::ChunkRecord>*,
                            pb::StoreRecordsReply*) override;

  const ControlCounters& counters() const { return counters_; }

 private:
  // Schedules a pass over `job` (when compaction is on); with a `report`,
  // fills it with the pass's outcome, waiting no longer than the call's
  // deadline allows.
  void Compact(grpc::ServerContext* ctx, const std::string& job,
               pb::CompactionReport* report);
  // The grant of the call's token (nullptr when the server is open);
  // UNAUTHENTICATED without a known token.
  Result<const Grant*> Caller(const grpc::ServerContextBase* ctx) const;
  // OK when the server is open or the call's token may touch `job`.
  Status Authorize(const grpc::ServerContextBase* ctx,
                   const std::string& job) const;
  // Rewrites `job`'s manifest log from the manifests still held.
  void RewriteLog(const std::string& job);
  // GetStep with regions: the shards of `info` holding part of them, each
  // with only those tensors (slice_index.h).
  Status ShardsOfRegions(const pb::GetStepRequest& req,
                         const pb::StepInfo& info, pb::GetStepReply* reply);
  static constexpr int kMaxRegions = 1 << 16;
  // A commit waiting for its group (control_commit.cc).
  struct PendingCommit;
  // Queues `p` for the committer; its `done` runs there once committed
  // (at once, UNAVAILABLE, when the service is stopping).
  void Enqueue(PendingCommit* p);
  // The committer thread: commits what is queued, up to kMaxCommitGroup
  // at a time, until the service stops and the queue is empty.
  void CommitLoop();
  // Commits `group` in the meta store and logs its disk-level shards.
  void CommitGroup(const std::vector<PendingCommit*>& group);
  // What follows one commit: counters, logs, retention, the promoter.
  void AfterCommit(const pb::CommitShardRequest& req, const Status& logged,
                   Result<pb::StepInfo>* info);
  // Logs the steps of partial_ still partial partial_warn_after_ after
  // their first commit, and forgets them (committer thread).
  void WarnLongPartial();
  // Runs `collect` on the durable tier (when there is one) after a Gc or
  // DeleteSteps, into reply->cold; a failure is reply->cold.error (the
  // call still succeeds: the disk's part stands, and the client goes on
  // to sweep the other servers).
  void CollectCold(const std::function<
                       Result<tier::ColdGcResult>(tier::ObjectStore*)>& collect,
                   pb::GcReply* reply);
  // A Gc's or DeleteSteps' reply from what the meta store did; compacts.
  void FillGcReply(grpc::ServerContext* ctx, const std::string& job,
                   const GcResult& r, bool wait, pb::GcReply* reply);

  MetaStore* meta_;
  Compactor* compactor_;
  Authorizer* auth_;
  ManifestLog* log_;
  SegmentStore* segments_;  // may be null: no disk figures in ListSteps
  std::string data_address_;
  std::string server_id_;
  std::string domain_;
  std::string node_;
  Rebaser* rebaser_ = nullptr;
  tier::Drainer* drainer_ = nullptr;
  MemoryTier* memory_ = nullptr;
  Promoter* promoter_ = nullptr;
  DataService* data_ = nullptr;
  const uint64_t instance_;  // HelloReply::instance
  RetentionPolicy retention_;
  ControlCounters counters_;
  SliceIndex slices_;
  absl::Mutex group_mu_;
  std::deque<PendingCommit*> group_ ABSL_GUARDED_BY(group_mu_);
  bool stopping_ ABSL_GUARDED_BY(group_mu_) = false;
  // Committer thread only: steps a commit left partial, since when.
  absl::Duration partial_warn_after_ = absl::Minutes(10);
  std::map<std::pair<std::string, int64_t>, absl::Time> partial_;
  std::thread committer_;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_CONTROL_SERVICE_H_
