// Reading from the cold store: a chunk (checked as every read is), and the
// steps a server's own disk does not hold, imported so that any server,
// even one started on an empty --data, serves every drained step.
//
// Thread-safety: as thread-safe as the stores given (all are).
#ifndef STAGGER_SERVER_TIER_COLD_READ_H_
#define STAGGER_SERVER_TIER_COLD_READ_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "format/chunk_id.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"
#include "server/tier/object_store.h"
#include "transport/buffer_pool.h"

namespace stagger::server::tier {

// Chunk `id` of `job` from the cold store: its record's header checksum,
// payload checksum and chunk id are checked. NOT_FOUND when the store does
// not hold it; DATA_LOSS naming the object when it fails a check.
// With `size` (the object's, from Size, or a reader's hint), one read and
// no stat, into a buffer from `pool` when given; a record longer than
// `size` is read again whole.
Result<StoredRecord> ReadColdChunk(ObjectStore* store, const std::string& job,
                                   const format::ChunkId& id,
                                   std::optional<uint64_t> size = std::nullopt,
                                   transport::BufferPool* pool = nullptr);

struct ImportStats {
  uint64_t jobs = 0;
  uint64_t steps = 0;     // imported (not held on this disk before)
  uint64_t refused = 0;   // step objects whose manifests were unusable
  uint64_t deferred = 0;  // passed over while a deletion held `guard`
};

struct ImportOptions {
  // Held (try-locked, never waited for) around each step's check and
  // import; a deletion that holds it shared from the disk's delete to the
  // store's is never undone by an import between the two. The step is
  // passed over (counted in `deferred`) while one does. nullptr: none.
  absl::Mutex* guard = nullptr;
  // Steps left out before, (job, step): not read again; those refused now
  // are added. nullptr: every step is tried.
  std::set<std::pair<std::string, int64_t>>* refused = nullptr;
};

// Records in `meta` every step of every job that the cold store holds and
// `meta` does not, with its manifests, marked drained: listing, GetStep
// and loads then see it, and its chunks are read from the store. A step
// whose objects do not parse is left out and counted in `refused` (logged
// once with ImportOptions::refused); one deleted from the store while it
// is read is passed over. UNAVAILABLE when the store cannot be reached.
// Cost: one listing of the store's jobs, one of each job's step objects,
// and reads of the steps imported only.
Result<ImportStats> ImportColdSteps(MetaStore* meta, ObjectStore* store,
                                    const ImportOptions& options = {});

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_COLD_READ_H_
