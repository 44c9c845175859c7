#include "server/chunk_read.h"

#include "absl/strings/str_cat.h"

namespace stagger::server {

namespace {
// A record moves once per compaction pass; more than a few moves during
// one read means something else is wrong.
constexpr int kMaxLookups = 4;
}  // namespace

Result<StoredRecord> ReadChunk(MetaStore* meta, SegmentStore* segments,
                               const std::string& job,
                               const format::ChunkId& id,
                               std::optional<ChunkMeta> known,
                               const IOOptions& io) {
  if (!known) {
    STAGGER_ASSIGN_OR_RETURN(known, meta->GetChunk(job, id));
  }
  ChunkLocation loc = known->location;
  for (int lookups = 1;; ++lookups) {
    Result<StoredRecord> rec = segments->Read(job, loc, io);
    if (absl::IsNotFound(rec.status()) && lookups < kMaxLookups) {
      STAGGER_ASSIGN_OR_RETURN(ChunkMeta now, meta->GetChunk(job, id));
      if (!(now.location == loc)) {
        loc = now.location;
        continue;
      }
    }
    if (rec.ok() && rec->header.chunk_id != id) {
      rec = absl::DataLossError(absl::StrCat("index points chunk ", id.ToHex(),
                                             " at a record of chunk ",
                                             rec->header.chunk_id.ToHex()));
    }
    if (!rec.ok()) {
      return WithContext(rec.status(), absl::StrCat("chunk ", id.ToHex()));
    }
    return rec;
  }
}

}  // namespace stagger::server
