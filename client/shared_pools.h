// Thread pools a process's Checkpointers share. A process that runs many
// ranks (a Checkpointer each) holds one pool of each kind instead of one
// per rank: 64 Checkpointers in one process ran 4 fetch and 2 encode
// threads each, 384 in all on 2 cores. (Copy threads stay per
// Checkpointer: a rank's Save() waits for its own snapshot alone.)
//
// A pool is kept while a Checkpointer holds it; the last one to let go
// joins its threads (after every queued task ran). Tasks of different
// Checkpointers run in the order queued. A Checkpointer never leaves a
// task behind it: its saves and loads wait for their own.
//
// Thread-safe.
#ifndef STAGGER_CLIENT_SHARED_POOLS_H_
#define STAGGER_CLIENT_SHARED_POOLS_H_

#include <functional>
#include <memory>
#include <string>

#include "util/executor.h"

namespace stagger::client {

// The process's pool named `name` with `threads` threads, each run at
// idle priority first when `idle` (`init` is then run on each, once).
// Pools of one name with other counts or priorities are distinct.
std::shared_ptr<Executor> SharedPool(const std::string& name, int threads,
                                     bool idle,
                                     const std::function<void()>& init);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_SHARED_POOLS_H_
