// MetaStore: the server's RocksDB metadata. Per job it keeps the chunk index
// (chunk id -> where its record lives), each step's state, and each rank's
// shard manifest. It is also the commit barrier: a step is complete when
// every rank in [0, world_size) has committed its shard.
//
// Keys (job names cannot contain '\0'):
//   c/<job>\0<chunk id 16B>          -> ChunkMeta (49 bytes; +16 with a
//                                       base; +12 with behind_*)
//   s/<job>\0<step u64 big-endian>   -> pb::StepInfo
//   m/<job>\0<step BE><rank u32 BE>  -> pb::ShardManifest
//   r/<job>\0<step BE>               -> "" (the step is in the cold store)
//                                       or "cold-only" (imported from it)
//
// Durability: chunk index entries are written without sync (the chunk bytes
// themselves were fdatasynced first); every commit is one synced WriteBatch,
// which also makes every earlier index entry durable (the WAL is ordered).
// So a step is never visible before the index entries it references.
//
// Liveness: a chunk is live while a step of its job references it (directly
// or as a delta base, transitively). Gc decides it on the server that holds
// the job's manifests (the coordinator); Sweep applies the coordinator's
// live set on a server that holds only chunks of the job. A delta is stored
// only where its base is (DataService), so the bases of a live chunk are
// always found in the index of the server that holds it.
//
// Thread-safety: all methods are thread-safe; commits are serialised.
#ifndef STAGGER_SERVER_META_STORE_H_
#define STAGGER_SERVER_META_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "format/chunk_id.h"
#include "format/manifest.pb.h"
#include "format/record.h"
#include "server/storage/segment_store.h"
#include "stagger/status.h"

namespace rocksdb {
class DB;
class Env;
class WriteBatch;
}  // namespace rocksdb

namespace stagger::server {

struct ChunkMeta {
  ChunkLocation location;
  uint64_t raw_length = 0;
  uint64_t stored_length = 0;  // encoded payload bytes
  format::Codec codec = format::Codec::kRaw;
  // For a delta chunk, the chunk it is a delta of.
  std::optional<format::ChunkId> base;
  int64_t written_unix_ms = 0;  // set by PutChunk when 0
  // For a whole chunk that older versions are stored as deltas against
  // (server/rebaser.h): how many deltas lead to it, at most, and their
  // stored bytes. 0 for every other chunk.
  uint32_t behind_hops = 0;
  uint64_t behind_bytes = 0;
};

using ChunkIdSet = absl::flat_hash_set<format::ChunkId>;

inline bool operator==(const ChunkLocation& a, const ChunkLocation& b) {
  return a.segment == b.segment && a.offset == b.offset &&
         a.record_size == b.record_size;
}

// Chunks no step needs that were written within the grace period, and
// so kept (they may belong to a save not yet committed).
struct GraceKept {
  uint64_t chunks = 0;
  uint64_t bytes = 0;  // stored bytes
  // When the last of them leaves the grace period (Unix ms; 0: none).
  int64_t until_unix_ms = 0;
};

struct GcResult {
  std::vector<int64_t> steps_deleted;
  uint64_t steps_kept = 0;
  uint64_t chunks_deleted = 0;
  uint64_t bytes_freed = 0;  // stored bytes no longer indexed
  GraceKept grace_kept;
};

struct SweepResult {
  uint64_t chunks_deleted = 0;
  uint64_t bytes_freed = 0;  // stored bytes no longer indexed
  GraceKept grace_kept;
};

// A rebase (server/rebaser.h) stored chunk `id`, found at `from`, anew as
// `to` (its location, codec and base).
struct Restored {
  format::ChunkId id;
  ChunkLocation from;
  ChunkMeta to;
};

// Compaction moved chunk `id` from `from` to `to` (a durable copy).
struct Relocation {
  format::ChunkId id;
  ChunkLocation from;
  ChunkLocation to;
};

class MetaStore {
 public:
  // Opens (creating) the RocksDB database at `path`.
  // `env` (not owned, outliving the store) replaces RocksDB's default
  // file access; tests pass one that injects faults.
  static Result<std::unique_ptr<MetaStore>> Open(const std::string& path,
                                                 rocksdb::Env* env = nullptr);
  ~MetaStore();

  // Records where a durable chunk lives (not synced; see above).
  Status PutChunk(const std::string& job, const format::ChunkId& id,
                  ChunkMeta meta);
  // NOT_FOUND when the job has no such chunk.
  Result<ChunkMeta> GetChunk(const std::string& job, const format::ChunkId& id);
  // Notes that the stored copy of chunk `id` failed its checks when read:
  // a put of the chunk then rewrites it instead of taking the index entry
  // as proof that the bytes are durable. PutChunk clears the mark.
  Status MarkBad(const std::string& job, const format::ChunkId& id);
  bool IsMarkedBad(const std::string& job, const format::ChunkId& id);

  // Validates `m`, checks every referenced chunk is stored (FAILED_PRECONDITION
  // naming the tensor and chunk otherwise), fills codec/stored_length from
  // the index, and records the shard in one synced batch. A repeated commit
  // of the identical shard is OK (a retry); a different shard for a rank that
  // already committed, or another world size, is ABORTED.
  // With `chunks_elsewhere` (the client places chunks on several servers), a
  // chunk missing from this index is taken as the manifest describes it;
  // its codec must be known and a base id given exactly for deltas.
  // Returns the step's state after the commit.
  // A shard with `in_memory` is a memory-level commit: a chunk missing
  // from the index is looked up with `held` (the server's memory tier)
  // too, and the rank is listed in StepInfo::memory_ranks. Committing the
  // same shard without `in_memory` then makes the rank disk-level (its
  // chunks must now be in the index, or elsewhere); the reverse is a
  // no-op. With `plan` (a memory-level commit that says where its copies
  // are), the shard's MemoryShard record is written in the same batch;
  // a disk-level commit of the rank deletes it.
  using HeldLookup = std::function<std::optional<ChunkMeta>(
      const std::string& job, const format::ChunkId& id)>;
  Result<pb::StepInfo> CommitShard(pb::ShardManifest m,
                                   bool chunks_elsewhere = false,
                                   const HeldLookup& held = nullptr,
                                   const pb::MemoryShard* plan = nullptr);

  // CommitShard's arguments, for CommitShards.
  struct CommitArgs {
    pb::ShardManifest manifest;
    bool chunks_elsewhere = false;
    HeldLookup held;
    const pb::MemoryShard* plan = nullptr;
  };
  // Commits each of `commits` as CommitShard does, in order, with one
  // synced write for all of them (a group commit: thousands of ranks
  // committing at once cost a few syncs, not one each). Returns each one's
  // outcome; a failed write fails every commit that wrote. Resolves the
  // manifests in place.
  std::vector<Result<pb::StepInfo>> CommitShards(
      std::vector<CommitArgs>& commits);

  // Memory-level shards the servers confirm on disk (server/promoter.h).
  struct MemoryShardRecord {
    std::string job;
    int64_t step = 0;
    uint32_t rank = 0;
    pb::MemoryShard shard;
  };
  // Every MemoryShard record, by job, step and rank.
  Result<std::vector<MemoryShardRecord>> MemoryShards();
  // Deletes one (its shard was made disk-level, or lost); a step left
  // with no rank and no other record goes with it.
  Status ForgetMemoryShard(const std::string& job, int64_t step, uint32_t rank);
  // At start: every memory-level shard is taken out of its step (the rank
  // uncommitted, the step no longer complete; a step left with no rank
  // stays, partial, so that deleting it deletes the record too) and kept in its
  // MemoryShard record as `set_aside`, in one synced batch: its chunks may have
  // been in the RAM a crash took, and a step is never listed complete with
  // bytes missing. The promoter commits it again once the servers confirm its
  // chunks on disk. Returns the steps by job. Their chunks stay live for gc
  // meanwhile.
  Result<std::map<std::string, std::vector<int64_t>>> SetAsideMemoryShards();

  // The jobs this store holds steps or chunk index entries of, by name.
  Result<std::vector<std::string>> ListJobs();

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
  // reclaimed by compaction, not here. With nothing to delete it still
  // collects unreferenced chunks past the grace; a job with no step here
  // is left alone. With `spare_undrained` (a cold store is configured), a
  // complete step not yet drained to it (MarkDrained) is not deleted: it
  // would never reach the store. INVALID_ARGUMENT for keep == 0.
  Result<GcResult> Gc(const std::string& job, uint32_t keep, int64_t grace_ms,
                      bool spare_undrained = false);
  // Deletes the steps `steps` of `job` (every step, complete or partial,
  // with `all`) and, as Gc does, the chunks no remaining step needs:
  // a chunk a remaining step uses, or a delta base on its chain, stays.
  // INVALID_ARGUMENT for neither or both of `steps` and `all`, or a
  // negative step; NOT_FOUND naming the steps this server does not hold,
  // or when it holds no step of the job (nothing is deleted then).
  Result<GcResult> DeleteSteps(const std::string& job,
                               const std::vector<int64_t>& steps, bool all,
                               int64_t grace_ms);

  // The chunks the job's steps (complete and partial) need: those their
  // manifests reference and the delta bases they name, closed over this
  // index's base links. The same set Gc keeps. NOT_FOUND when this server
  // holds no step of the job.
  Result<ChunkIdSet> LiveChunks(const std::string& job);

  // On a server holding chunks of `job` but not its manifests: deletes the
  // index entries of the job's chunks that are not in `live` (closed over
  // this index's base links first) and were written more than `grace_ms`
  // ago. FAILED_PRECONDITION when this server holds steps of the job: there
  // its own Gc decides, and a live set from elsewhere could be incomplete.
  Result<SweepResult> Sweep(const std::string& job, ChunkIdSet live,
                            int64_t grace_ms);

  // Calls `fn` for every index entry of `job`, in id order, from a
  // consistent snapshot. DATA_LOSS for an undecodable entry.
  Status ForEachChunk(
      const std::string& job,
      const std::function<void(const format::ChunkId&, const ChunkMeta&)>& fn);

  // Points each moved chunk's index entry at `to`, but only where it still
  // points at `from` (a Gc may have deleted it, a new put moved it); one
  // synced batch, so the new location is durable before the caller deletes
  // the old bytes. Returns how many entries were moved.
  Result<uint64_t> RelocateChunks(const std::string& job,
                                  const std::vector<Relocation>& moves);

  // Points every chunk of `changes` at its new record, all or none: only
  // when each entry still points at its `from` (ABORTED otherwise: a gc,
  // a relocation or a repair came first). One synced batch, so the old
  // records may be reclaimed once it returns. The entries keep their
  // written time.
  //
  // A rebase that lands while a Gc, DeleteSteps or Sweep of the job is
  // deciding what is live is ABORTED too: it may make a chunk the decision
  // keeps a delta of one the decision has already found dead (the rebaser
  // tries once more later, or leaves the chunk as it was).
  Status Restore(const std::string& job, const std::vector<Restored>& changes);

  // Runs `hook` (with the job) in every collection between its scan of
  // what is live and its delete write: for tests of what may happen
  // meanwhile. Before the store is used from other threads.
  void SetCollectHookForTesting(std::function<void(const std::string&)> hook) {
    collect_hook_ = std::move(hook);
  }

  // NOT_FOUND when the rank has not committed that step.
  Result<pb::ShardManifest> GetShard(const std::string& job, int64_t step,
                                     uint32_t rank);

  // The durable tier's books (server/tier/drainer.h): steps of `job`
  // whose every object is in the cold store. Synced.
  Status MarkDrained(const std::string& job, int64_t step);
  Result<std::set<int64_t>> DrainedSteps(const std::string& job);
  // Of those, the steps ImportStep recorded: held in the cold store only.
  Result<std::set<int64_t>> ColdOnlySteps(const std::string& job);
  // Records a complete step read back from the cold store, with its
  // manifests, marked drained, in one synced batch; its chunks are not
  // indexed (reads of chunks this index lacks go to the cold store).
  // ALREADY_EXISTS when this store holds the step; INVALID_ARGUMENT when
  // the manifests are not the step's committed ranks.
  Status ImportStep(const std::string& job, const pb::StepInfo& info,
                    const std::vector<pb::ShardManifest>& shards);

 private:
  // The step `m` commits to: the stored one (ABORTED when its world size
  // differs), or a new one.
  Result<pb::StepInfo> StepToCommit(const pb::ShardManifest& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Validates `c`'s manifest and fills its chunks from the index
  // (ResolveChunk); `raw` and `stored` get its bytes.
  Result<pb::StepInfo> Resolve(CommitArgs& c, uint64_t* raw, uint64_t* stored);
  // Applies the resolved commit `c` to `info` (its step's state as the
  // group has it) and adds its shard's writes to `batch` (`wrote`: any;
  // the step's state is written once per group by the caller); `shards`
  // holds the group's shards so far. The step's state after it.
  Result<pb::StepInfo> Apply(
      const CommitArgs& c, uint64_t raw, uint64_t stored, pb::StepInfo* info,
      std::map<std::tuple<std::string, int64_t, uint32_t>, pb::ShardManifest>*
          shards,
      rocksdb::WriteBatch* batch, bool* wrote)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  explicit MetaStore(std::unique_ptr<rocksdb::DB> db);
  // The drained steps of `job`; only those imported with `cold_only`.
  Result<std::set<int64_t>> TierSteps(const std::string& job, bool cold_only);
  // Adds the chunks referenced by `steps`' manifests (ids and base ids),
  // and by the job's set-aside memory-level shards.
  Status AddReferenced(const std::string& job,
                       const std::vector<pb::StepInfo>& steps, ChunkIdSet* live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Deletes `doomed` of `steps` (the job's steps, partial included) and
  // the chunks the others do not need, as Gc and DeleteSteps do.
  Result<GcResult> DeleteStepsLocked(const std::string& job,
                                     const std::vector<pb::StepInfo>& steps,
                                     const std::set<int64_t>& doomed,
                                     int64_t grace_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Adds the ids and base ids of `shard`'s chunks.
  static Status AddShardChunks(const pb::ShardManifest& shard,
                               ChunkIdSet* live);
  Status AddSetAside(const std::string& job, ChunkIdSet* live);
  // Adds to `batch` the deletion of the MemoryShard records of `step`.
  void DeleteMemoryShards(const std::string& job, int64_t step,
                          rocksdb::WriteBatch* batch);
  // Adds, transitively, the bases this index records for chunks in `live`.
  Status CloseOverBases(const std::string& job, ChunkIdSet* live);
  // Adds to `batch` the deletion of the job's index entries outside `live`
  // written more than `grace_ms` ago, then writes `batch`, synced.
  Result<SweepResult> DeleteUnreferenced(const std::string& job,
                                         const ChunkIdSet& live,
                                         int64_t grace_ms,
                                         rocksdb::WriteBatch* batch);

  std::unique_ptr<rocksdb::DB> db_;
  absl::Mutex commit_mu_;
  // Orders read-check-write updates of index entries (PutChunk,
  // RelocateChunks, Restore, the delete write of Gc and Sweep) against each
  // other.
  absl::Mutex index_mu_ ABSL_ACQUIRED_AFTER(commit_mu_);
  // Jobs whose collection is between its scan of what is live and its
  // delete write: Restore refuses to change their bases meanwhile.
  absl::flat_hash_set<std::string> collecting_ ABSL_GUARDED_BY(index_mu_);
  std::function<void(const std::string&)> collect_hook_;

  // Marks `job` as being collected for its lifetime (CollectingScope).
  class CollectingScope;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_META_STORE_H_
