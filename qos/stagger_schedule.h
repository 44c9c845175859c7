// Stagger schedule: when each rank of a job starts shipping a checkpoint and
// by when it should be done, so that a thousand ranks do not hit the storage
// at the same instant (docs/design.md §6.2).
//
// Nodes are spread first: each node gets its own slot of the spread span,
// and the ranks of a node are interleaved inside their node's slot. Ranks
// are assumed numbered node-major (rank r runs on node r / ranks_per_node,
// the usual launcher layout). With
//
//   N     = ceil(world_size / ranks_per_node)       nodes
//   S     = floor(spread * window_ns)               the spread span
//   node  = rank / ranks_per_node, local = rank % ranks_per_node
//   start(rank) = floor(S * (node * ranks_per_node + local)
//                         / (N * ranks_per_node))
//   last  = start(world_size - 1)
//   deadline(rank) = start(rank) + (window_ns - last)
//
// every start lies in [0, S) (0 for a single rank), node n's ranks start in
// [n * S / N, (n + 1) * S / N), every rank gets the same sending time
// window_ns - last, and the last rank finishes exactly at window_ns. Both
// values are offsets from the save's start; the caller adds its own time.
// Pure function: thread-safe and deterministic.
#ifndef STAGGER_QOS_STAGGER_SCHEDULE_H_
#define STAGGER_QOS_STAGGER_SCHEDULE_H_

#include <cstdint>

#include "stagger/status.h"

namespace stagger::qos {

struct StaggerOptions {
  int rank = 0;
  int world_size = 1;
  int ranks_per_node = 1;
  // The time a whole save may take, usually the checkpoint interval.
  int64_t window_ns = 0;
  // Share of the window over which start offsets are spread, in [0, 1].
  double spread = 0.5;
};

struct StaggerSlot {
  // When this rank starts sending, from the save's start.
  int64_t start_offset_ns = 0;
  // When this rank should be done (the pacer's deadline), from the save's
  // start; at most window_ns.
  int64_t deadline_offset_ns = 0;
};

// The slot of options.rank. INVALID_ARGUMENT when world_size or
// ranks_per_node is < 1, rank is outside [0, world_size), window_ns < 0, or
// spread is outside [0, 1].
Result<StaggerSlot> ComputeStaggerSlot(const StaggerOptions& options);

}  // namespace stagger::qos

#endif  // STAGGER_QOS_STAGGER_SCHEDULE_H_
