// How a step lies in the cold store (docs/format.md, "The durable tier"):
// one namespace per job, and in it
//
//   chunk.<id, 32 hex digits>           a chunk record: the 64-byte header
//                                       and its payload (no padding), as
//                                       the disk holds it
//   manifest.<step, 20 digits>.<rank, 10 digits>
//                                       a rank's pb::ShardManifest
//   step.<step, 20 digits>              the step's pb::StepInfo, written
//                                       last: a step is in the store only
//                                       when this object is
//
// Chunks are named by id alone, so a chunk that several steps use, or that
// deltas are based on, is stored once. A delta's base is stored before the
// delta: the store never holds a delta it cannot decode.
#ifndef STAGGER_SERVER_TIER_LAYOUT_H_
#define STAGGER_SERVER_TIER_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "format/chunk_id.h"
#include "server/tier/object_store.h"

namespace stagger::server::tier {

ObjectName ChunkObject(const std::string& job, const format::ChunkId& id);
ObjectName ManifestObject(const std::string& job, int64_t step, uint32_t rank);
ObjectName StepObject(const std::string& job, int64_t step);
// The names of every rank's manifest of `step` start with this.
std::string ManifestPrefix(int64_t step);

inline constexpr std::string_view kStepPrefix = "step.";
// What an object's name says; nullopt for a name of another kind.
// "step.<20 digits>": the step.
std::optional<int64_t> StepOfObject(std::string_view name);
// "manifest.<20 digits>.<10 digits>": the step.
std::optional<int64_t> StepOfManifest(std::string_view name);
// "chunk.<32 hex digits>": the chunk.
std::optional<format::ChunkId> ChunkOfObject(std::string_view name);

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_LAYOUT_H_
