// Reading from the cold store: a chunk (checked as every read is), and the
// steps a server's own disk does not hold, imported so that any server,
// even one started on an empty --data, serves every drained step.
//
// Thread-safety: as thread-safe as the stores given (all are).
#ifndef STAGGER_SERVER_TIER_COLD_READ_H_
#define STAGGER_SERVER_TIER_COLD_READ_H_

#include <optional>
#include <string>

#include "format/chunk_id.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"
#include "server/tier/object_store.h"

namespace stagger::server::tier {

// Chunk `id` of `job` from the cold store: its record's header checksum,
// payload checksum and chunk id are checked. NOT_FOUND when the store does
// not hold it; DATA_LOSS naming the object when it fails a check.
// With `size` (the object's, from Size), one read and no stat.
Result<StoredRecord> ReadColdChunk(ObjectStore* store, const std::string& job,
                                   const format::ChunkId& id,
                                   std::optional<uint64_t> size = std::nullopt);

struct ImportStats {
  uint64_t jobs = 0;
  uint64_t steps = 0;    // imported (not held on this disk before)
  uint64_t refused = 0;  // step objects whose manifests were unusable
};

// Records in `meta` every step of every job that the cold store holds and
// `meta` does not, with its manifests, marked drained: listing, GetStep
// and loads then see it, and its chunks are read from the store. A step
// whose objects do not parse is left out and counted in `refused` (logged).
// UNAVAILABLE when the store cannot be reached.
Result<ImportStats> ImportColdSteps(MetaStore* meta, ObjectStore* store);

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_COLD_READ_H_
