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

#include "client/server_set.h"
#include "format/manifest.pb.h"
#include "stagger/status.h"

namespace stagger::client {

// Each Flush waits at most `flush_timeout_s` for a server's write-behind.
// FAILED_PRECONDITION naming how many chunks have fewer than `replicas`
// copies on disk (a server that held them in memory died, or is down);
// the shard then stays memory-level.
Status PromoteShard(ServerSet& servers, size_t replicas,
                    const pb::ShardManifest& manifest, double flush_timeout_s);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_PROMOTE_H_
