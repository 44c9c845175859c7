// ReadChunk: a chunk's record read through the index, robust against
// compaction moving it between the index lookup and the read.
//
// Thread-safety: as thread-safe as the stores it is given (both are).
#ifndef STAGGER_SERVER_CHUNK_READ_H_
#define STAGGER_SERVER_CHUNK_READ_H_

#include <optional>
#include <string>

#include "format/chunk_id.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"
#include "stagger/status.h"

namespace stagger::server {

// Reads chunk `id` of `job` where the index (or `known`, an entry looked up
// earlier) places it, and checks that the record is that chunk's. When the
// segment is gone, because compaction moved the record and removed the
// segment after the lookup, the index is read again (a few times, while
// the location keeps changing). Errors: the index's NOT_FOUND when the job
// has no such chunk; DATA_LOSS for a corrupt record or one of another
// chunk, naming the chunk.
// `io` goes to the segment store (its check_payload, say).
Result<StoredRecord> ReadChunk(MetaStore* meta, SegmentStore* segments,
                               const std::string& job,
                               const format::ChunkId& id,
                               std::optional<ChunkMeta> known = std::nullopt,
                               const IOOptions& io = {});

}  // namespace stagger::server

#endif  // STAGGER_SERVER_CHUNK_READ_H_
