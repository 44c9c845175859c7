// Loader: fills tensors from the shards of a complete step, resharding when
// the step was saved by another number of ranks or with another layout.
//
//   LoadTarget ──┐                 shards of the step (GetStep)
//                ├─ PlanLoad: per tensor, the saved slices of its name
//                │   (preferred rank first, then by rank) cover the wanted
//                │   slice box by box (format/slice.h); each overlapping
//                │   chunk becomes one FetchItem, from ForSlot(saved rank,
//                │   tensor, chunk index), decoded straight into place when
//                │   it maps to one contiguous run, else scattered
//                │   (only the parts it reads asked for: FetchItem::parts)
//                └─ ChunkIo::Fetch (parallel, bounded window)
//
// A tensor registered without a global shape is a per-rank tensor: its
// global shape is its shape and it sits at offset 0. Saved entries of other
// ranks' per-rank tensors that differ from it are passed over.
//
// Thread-safety: functions are thread-safe; a LoadPlan is used by one
// thread.
#ifndef STAGGER_CLIENT_LOADER_H_
#define STAGGER_CLIENT_LOADER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "client/chunk_io.h"
#include "client/server_set.h"
#include "format/manifest.pb.h"
#include "format/slice.h"
#include "stagger/status.h"

namespace stagger::client {

// A tensor to fill: the slice wanted now and where its bytes go.
struct LoadTarget {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> global_shape;   // empty: per-rank (not sharded)
  std::vector<int64_t> global_offset;  // empty when global_shape is
  char* dest = nullptr;  // host memory for the slice's row-major bytes
};

// The fetches that fill a set of targets.
struct LoadPlan {
  std::vector<FetchItem> items;
  std::deque<std::vector<format::CopyRun>> scatters;  // items point here
  uint64_t chunks_direct = 0;     // decoded straight into place
  uint64_t chunks_scattered = 0;  // decoded into scratch, then copied
  // Of those, the ones of which only parts are read (FetchItem::parts).
  uint64_t chunks_ranged = 0;
  // Per-rank targets filled from another rank's save than prefer_rank's,
  // with that rank.
  std::map<std::string, uint32_t> from_other_ranks;
};

// Adds to `plan` the chunks that fill every target from `shards` (any
// subset of a step's shards; they must outlive the plan), taking each part
// of a wanted slice from the first saved slice that holds it, with
// `prefer_rank`'s shard first, then by rank.
// NOT_FOUND naming the tensor when no shard holds it, or naming the region
// of the global tensor that none of the saved slices covers;
// INVALID_ARGUMENT naming the tensor when a saved entry's dtype or global
// shape differs from the target's; DATA_LOSS when a saved entry's chunks do
// not follow its shard's chunk size.
Status PlanLoad(const std::vector<LoadTarget>& targets,
                const std::vector<const pb::ShardManifest*>& shards,
                uint32_t prefer_rank, ServerSet& servers, LoadPlan* plan);

// Loads `step` (or kLatest) of `job` into `targets` as rank `rank` of
// `world_size`, and returns the step loaded. With the world size the step
// was saved with, it reads this rank's and rank 0's shards (rank 0 holds
// the replicated tensors), and all shards only when those do not cover the
// targets; with another world size, all shards. NOT_FOUND when the step is
// missing or not complete; otherwise PlanLoad's and the fetches' errors
// (DATA_LOSS for corrupt chunks; targets may then hold partial data);
// CANCELLED once `*cancel` (optional) turns true, after the fetches in
// flight (targets then hold partial data).
// `planning` (optional) gets what planning the load cost.
struct LoadPlanning {
  double seconds = 0;           // from the call to the plan made
  uint64_t manifest_bytes = 0;  // of the manifests read (GetStep replies)
  uint32_t manifests = 0;       // shards read
  // LoadPlan::from_other_ranks of the plan made.
  std::map<std::string, uint32_t> from_other_ranks;
};
Result<int64_t> LoadStep(ServerSet& servers, ChunkIo& io,
                         const std::string& job, uint32_t rank,
                         uint32_t world_size, int64_t step,
                         const std::vector<LoadTarget>& targets,
                         const std::atomic<bool>* cancel = nullptr,
                         LoadPlanning* planning = nullptr);

// True when a rank registering `shape` with this global shape holds the
// whole global tensor: in a job of several ranks only rank 0 stores it.
bool IsReplicated(const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& global_shape);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_LOADER_H_
