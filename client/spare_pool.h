// SparePool: the process's one idle staging pool. A Checkpointer whose
// default pool (CheckpointerOptions::staging_bytes 0) outlives it parks the
// pool here, and the next Checkpointer of the process that needs a pool of
// that slab size takes it instead of mapping and faulting a new one: a
// reconnect, a Checkpointer made for a load after the one that saved, a
// second job. A parked pool is unmapped after `keep` (60 s by default), so
// a process that is done checkpointing gives the memory back.
//
// Only one pool is kept (the largest parked); Checkpointers alive at once
// each have their own, so that one's save never waits for another's slabs.
//
// Thread-safety: thread-safe. A process forked while a pool is parked
// keeps a copy-on-write view of it, released by its own timer.
#ifndef STAGGER_CLIENT_SPARE_POOL_H_
#define STAGGER_CLIENT_SPARE_POOL_H_

#include <chrono>
#include <cstdint>
#include <memory>

#include "client/staging_pool.h"

namespace stagger::client {

class SparePool {
 public:
  static constexpr std::chrono::seconds kDefaultKeep{60};

  // Keeps `pool` for `keep`, unless the spare already parked is larger
  // (then `pool` is unmapped now).
  static void Park(std::unique_ptr<StagingPool> pool,
                   std::chrono::milliseconds keep = kDefaultKeep);
  // The parked pool when its slabs are `slab_bytes` and it holds at least
  // `min_bytes` and at most `max_bytes`; nullptr otherwise (the spare then
  // stays parked).
  static std::unique_ptr<StagingPool> Take(uint64_t min_bytes,
                                           uint64_t max_bytes,
                                           uint64_t slab_bytes);
  // Bytes parked now (0 when none).
  static uint64_t ParkedBytes();
  // How long the timer's current wait for the parked pool's expiry has
  // left; zero while it waits for none.
  static std::chrono::milliseconds TimerWaitLeft();
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_SPARE_POOL_H_
