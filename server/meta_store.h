// MetaStore: the server's RocksDB metadata. Per job it keeps the chunk index
// (chunk id -> where its record lives), each step's state, and each rank's
// shard manifest. It is also the commit barrier: a step is complete when
// every rank in [0, world_size) has committed its shard.
//
// Keys (job names cannot contain '\0'):
//   c/<job>\0<chunk id 16B>          -> ChunkMeta (49 bytes; 65 with a base)
//   s/<job>\0<step u64 big-endian>   -> pb::StepInfo
//   m/<job>\0<step BE><rank u32 BE>  -> pb::ShardManifest
//
// Durability: chunk index entries are written without sync (the chunk bytes
// themselves were fdatasynced first); every commit is one synced WriteBatch,
// which also makes every earlier index entry durable (the WAL is ordered).
// So a step is never visible before the index entries it references.
//
// Thread-safety: all methods are thread-safe; commits are serialised.
#ifndef STAGGER_SERVER_META_STORE_H_
#define STAGGER_SERVER_META_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "format/chunk_id.h"
#include "format/manifest.pb.h"
#include "format/record.h"
#include "server/storage/segment_store.h"
#include "stagger/status.h"

namespace rocksdb {
class DB;
}

namespace stagger::server {

struct ChunkMeta {
  ChunkLocation location;
  uint64_t raw_length = 0;
  uint64_t stored_length = 0;  // encoded payload bytes
  format::Codec codec = format::Codec::kRaw;
  // For a delta chunk, the chunk it is a delta of.
  std::optional<format::ChunkId> base;
  int64_t written_unix_ms = 0;  // set by PutChunk when 0
};

struct GcResult {
  std::vector<int64_t> steps_deleted;
  uint64_t steps_kept = 0;
  uint64_t chunks_deleted = 0;
  uint64_t bytes_freed = 0;  // stored bytes no longer indexed
};

class MetaStore {
 public:
  // Opens (creating) the RocksDB database at `path`.
  static Result<std::unique_ptr<MetaStore>> Open(const std::string& path);
  ~MetaStore();

  // Records where a durable chunk lives (not synced; see above).
  Status PutChunk(const std::string& job, const format::ChunkId& id,
                  ChunkMeta meta);
  // NOT_FOUND when the job has no such chunk.
  Result<ChunkMeta> GetChunk(const std::string& job, const format::ChunkId& id);

  // Validates `m`, checks every referenced chunk is stored (FAILED_PRECONDITION
  // naming the tensor and chunk otherwise), fills codec/stored_length from
  // the index, and records the shard in one synced batch. A repeated commit
  // of the identical shard is OK (a retry); a different shard for a rank that
  // already committed, or another world size, is ABORTED.
  // Returns the step's state after the commit.
  Result<pb::StepInfo> CommitShard(pb::ShardManifest m);

  // NOT_FOUND when the step was never started.
  Result<pb::StepInfo> GetStep(const std::string& job, int64_t step);
  // The newest complete step; NOT_FOUND when there is none.
  Result<pb::StepInfo> LatestComplete(const std::string& job);
  // Steps oldest first; partial ones only when asked.
  Result<std::vector<pb::StepInfo>> ListSteps(const std::string& job,
                                              bool include_partial);
  // Deletes every step older than the newest `keep` complete ones, and
  // the index entries of chunks no remaining step references (directly or
  // as a delta base) and written more than `grace_ms` ago (younger ones
  // may belong to a save not yet committed). Their segment space is
  // reclaimed by compaction, not here. INVALID_ARGUMENT for keep == 0.
  Result<GcResult> Gc(const std::string& job, uint32_t keep, int64_t grace_ms);

  // NOT_FOUND when the rank has not committed that step.
  Result<pb::ShardManifest> GetShard(const std::string& job, int64_t step,
                                     uint32_t rank);

 private:
  explicit MetaStore(std::unique_ptr<rocksdb::DB> db);
  std::unique_ptr<rocksdb::DB> db_;
  absl::Mutex commit_mu_;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_META_STORE_H_
