// Validation of manifest messages (format/manifest.proto). Used by the
// server on every CommitShard and by the client on every manifest it reads:
// neither trusts a manifest it did not check.
#ifndef STAGGER_FORMAT_MANIFEST_H_
#define STAGGER_FORMAT_MANIFEST_H_

#include <string>

#include "format/manifest.pb.h"
#include "stagger/status.h"

namespace stagger::format {

inline constexpr size_t kMaxTensorsPerShard = 1 << 20;
inline constexpr uint32_t kMaxWorldSize = 1 << 20;
inline constexpr uint64_t kMaxChunkSize = 64ull << 20;

// Checks every field: job and tensor names, rank < world_size, world size in
// range, step >= 0, unique tensor names, dtype/shape/byte_size agreement,
// slice inside the global shape, chunk ids of 16 bytes, known codecs, chunk
// lengths that add up to byte_size. INVALID_ARGUMENT naming the field.
Status ValidateShardManifest(const pb::ShardManifest& m);

// The ranks of [0, world_size) that a partial step has no commit from, as
// a phrase: "rank 2", "ranks 1, 3", "ranks 0, 1, ... and 40 more" (at most
// `named` named); "" when none is missing.
std::string MissingRanks(const pb::StepInfo& step, size_t named = 16);

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_MANIFEST_H_
