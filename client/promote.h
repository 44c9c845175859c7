// PromoteShard: makes a memory-level shard (ShardManifest::in_memory, a save
// with durability "memory") disk-level, once the servers wrote its chunks
// behind.
//
//   every server up ── Flush(job, ids) ──► waits for its write-behind, says
//                                          which ids it holds on disk
//   each id on >= replicas disks? ── yes ─► CommitShard without in_memory
//                                 └─ no ──► FAILED_PRECONDITION (degraded)
//
// Thread-safety: as the ServerSet; blocks the caller.
#ifndef STAGGER_CLIENT_PROMOTE_H_
#define STAGGER_CLIENT_PROMOTE_H_

#include <cstddef>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/server_set.h"
#include "format/manifest.pb.h"
#include "stagger/status.h"
#include "util/executor.h"

namespace stagger::client {

// Each Flush waits at most `flush_timeout_s` for a server's write-behind.
// FAILED_PRECONDITION naming how many chunks have fewer than `replicas`
// copies on disk (a server that held them in memory died, or is down);
// the shard then stays memory-level.
Status PromoteShard(ServerSet& servers, size_t replicas,
                    const pb::ShardManifest& manifest, double flush_timeout_s);

// A Checkpointer's memory-level saves made disk-level one after another,
// on a thread of its own (PromoteShard each), logging those that cannot
// be.
class Promoter {
 public:
  // `servers` (not owned) must outlive the Promoter.
  Promoter(ServerSet* servers, size_t replicas, double flush_timeout_s);
  // Finishes the promotions queued.
  ~Promoter() = default;

  void Queue(pb::ShardManifest manifest);
  // Waits up to `timeout` until every promotion queued so far is done: OK;
  // DEADLINE_EXCEEDED while some are not; else the first one's error
  // (returned once).
  Status WaitDisk(absl::Duration timeout);

 private:
  ServerSet* servers_;
  const size_t replicas_;
  const double flush_timeout_s_;
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  Status error_ ABSL_GUARDED_BY(mu_);
  Executor thread_{1};  // last: its tasks use the members above
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_PROMOTE_H_
