// The save plan: from the tensors a rank stores and what its previous
// committed save left, the manifest of a new step and the list of chunks
// to snapshot, fingerprint and ship (SaveJob runs it). Pure: no I/O, no
// locks; the Checkpointer gathers the inputs and owns the outputs.
//
// Per chunk it decides: which servers hold its slot, the previous
// version's id (an unchanged chunk is referenced, not shipped), whether
// the previous version's bytes serve as a delta base (deltas on, the
// bytes held, and the chain short enough, or every server of the slot
// rebases deltas), and whether this chunk's bytes are kept as the next
// save's base (the first chunks in tensor order, up to the budget).
//
// After a save commits, RememberOutcomes folds its chunks' outcomes into
// the per-tensor history the next plan reads.
//
// Thread-safety: functions only; callers serialize access to the history.
#ifndef STAGGER_CLIENT_SAVE_PLAN_H_
#define STAGGER_CLIENT_SAVE_PLAN_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/save_job.h"
#include "client/server_set.h"
#include "format/chunk_id.h"
#include "format/manifest.pb.h"
#include "stagger/tensor.h"

namespace stagger::client {

// One tensor's chunks in the last committed save, so the next one can
// reference unchanged chunks and encode changed ones as deltas.
struct PreviousChunks {
  uint64_t bytes = 0;
  uint64_t chunk_size = 0;
  std::vector<format::ChunkId> ids;
  // With deltas on: each chunk's bytes and how many deltas lead to it.
  std::vector<std::shared_ptr<const std::string>> versions;
  std::vector<int> depth;
  // In-place (device) fingerprints, for CUDA tensors.
  std::vector<std::optional<std::array<uint64_t, 2>>> fingerprints;
  std::vector<bool> at_home;  // ChunkOutcome::at_home
};

// A tensor the plan stores.
struct PlanTensor {
  const TensorSpec* spec = nullptr;  // data, shape, dtype; not owned
  uint64_t bytes = 0;
  SnapshotSource* source = nullptr;  // how its bytes are copied
  // Its previous save with this byte size and chunk size (empty if none).
  PreviousChunks previous;
};

struct SavePlanOptions {
  std::string job;
  int64_t step = 0;
  uint32_t rank = 0, world_size = 1, replicas = 1;
  std::string node;  // the writer's node (ShardManifest::node)
  uint64_t chunk_size = 0;
  int64_t created_unix_ms = 0;
  // Deltas on (delta_chain_max > 0 and a codec that is not "raw").
  bool deltas_on = false;
  int delta_chain_max = 0;
  // Bytes of chunks whose bytes are kept as the next save's delta bases.
  uint64_t keep_budget = 0;
  // The servers of chunk `index` of tensor `name`, ranked for its slot.
  std::function<std::vector<ServerConn*>(const std::string& name,
                                         uint64_t index)>
      slot_servers;
};

struct SavePlan {
  // `chunks[i].ref` point into it; moving the message (into the save job)
  // keeps them valid.
  std::unique_ptr<pb::ShardManifest> manifest;
  std::vector<SaveChunk> chunks;  // tensor by tensor, in manifest order
  uint64_t state_bytes = 0;       // the tensors' bytes
  std::vector<uint64_t> tensor_bytes;
};

// Whether every server of `servers` rebases deltas (false when empty).
bool AllRebase(const std::vector<ServerConn*>& servers);

// The plan of a save of `tensors` (in the order given) with `o`.
SavePlan PlanSave(const SavePlanOptions& o, std::vector<PlanTensor> tensors);

// Folds a committed save's manifest `m` and its chunks' outcomes (across
// tensors, in manifest order) into `history`, by tensor name.
void RememberOutcomes(const pb::ShardManifest& m,
                      const std::vector<ChunkOutcome>& outcomes,
                      std::map<std::string, PreviousChunks>* history);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_SAVE_PLAN_H_
