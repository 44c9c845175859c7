// HostSnapshotSource: snapshots host memory with memcpy on a pool of copy
// threads, several chunks in parallel. Capture and arrival in staging are
// the same moment for host memory.
#ifndef STAGGER_CLIENT_HOST_SNAPSHOT_H_
#define STAGGER_CLIENT_HOST_SNAPSHOT_H_

#include <memory>

#include "client/snapshot_source.h"
#include "util/executor.h"

namespace stagger::client {

// `copy_threads` >= 1 worker threads do the copies.
std::unique_ptr<SnapshotSource> NewHostSnapshotSource(int copy_threads);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_HOST_SNAPSHOT_H_
