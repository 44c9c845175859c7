#include "server/meta_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "format/internal/endian.h"
#include "format/manifest.h"
#include "format/names.h"
#include "server/internal/meta_keys.h"

namespace stagger::server {
namespace {

using meta_internal::BadKey;
using meta_internal::ChunkKey;
using meta_internal::DrainedKey;
using meta_internal::FromRocks;
using meta_internal::JobPrefix;
using meta_internal::kColdOnly;
using meta_internal::MemoryShardKey;
using meta_internal::MemoryShardPrefix;
using meta_internal::ParseValue;
using meta_internal::PutBE64;
using meta_internal::ShardKey;
using meta_internal::StepKey;

using format_internal::GetLE;
using format_internal::PutLE;

constexpr size_t kChunkMetaSize = 49;

std::string EncodeChunkMeta(const ChunkMeta& m) {
  std::string v(kChunkMetaSize, '\0');
  PutLE<uint64_t>(&v[0], m.location.segment);
  PutLE<uint64_t>(&v[8], m.location.offset);
  PutLE<uint64_t>(&v[16], m.location.record_size);
  PutLE<uint64_t>(&v[24], m.raw_length);
  PutLE<uint64_t>(&v[32], m.stored_length);
  v[40] = static_cast<char>(m.codec);
  PutLE<uint64_t>(&v[41], static_cast<uint64_t>(m.written_unix_ms));
  if (m.base) v += m.base->ToBytes();
  if (m.behind_hops != 0 || m.behind_bytes != 0) {
    char b[12];
    PutLE<uint32_t>(&b[0], m.behind_hops);
    PutLE<uint64_t>(&b[4], m.behind_bytes);
    v.append(b, sizeof b);
  }
  return v;
}

Result<ChunkMeta> DecodeChunkMeta(std::string_view v) {
  const size_t extra =
      v.size() < kChunkMetaSize ? 1 : v.size() - kChunkMetaSize;
  const bool has_base = extra == 16 || extra == 28;
  const bool has_behind = extra == 12 || extra == 28;
  if ((extra != 0 && !has_base && !has_behind) ||
      !format::IsKnownCodec(static_cast<uint8_t>(v[40]))) {
    return absl::DataLossError("corrupt chunk index entry");
  }
  ChunkMeta m;
  m.location.segment = GetLE<uint64_t>(&v[0]);
  m.location.offset = GetLE<uint64_t>(&v[8]);
  m.location.record_size = GetLE<uint64_t>(&v[16]);
  m.raw_length = GetLE<uint64_t>(&v[24]);
  m.stored_length = GetLE<uint64_t>(&v[32]);
  m.codec = static_cast<format::Codec>(v[40]);
  m.written_unix_ms = static_cast<int64_t>(GetLE<uint64_t>(&v[41]));
  if (has_base) {
    auto base = format::ChunkId::FromBytes(v.substr(kChunkMetaSize, 16));
    if (!base.ok()) return absl::DataLossError("corrupt chunk index entry");
    m.base = *base;
  }
  if (has_behind) {
    const char* b = v.data() + v.size() - 12;
    m.behind_hops = GetLE<uint32_t>(b);
    m.behind_bytes = GetLE<uint64_t>(b + 4);
  }
  return m;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

MetaStore::MetaStore(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}
MetaStore::~MetaStore() = default;

Result<std::unique_ptr<MetaStore>> MetaStore::Open(const std::string& path,
                                                   rocksdb::Env* env) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", path, ": ", ec.message()));
  }
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 4;
  if (env != nullptr) options.env = env;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("open ", path));
  return std::unique_ptr<MetaStore>(
      new MetaStore(std::unique_ptr<rocksdb::DB>(raw)));
}

Status MetaStore::PutChunk(const std::string& job, const format::ChunkId& id,
                           ChunkMeta meta) {
  if (meta.written_unix_ms == 0) meta.written_unix_ms = NowMs();
  rocksdb::WriteOptions wo;
  wo.sync = false;
  rocksdb::WriteBatch batch;
  batch.Put(ChunkKey(job, id), EncodeChunkMeta(meta));
  batch.Delete(BadKey(job, id));
  absl::MutexLock lock(&index_mu_);
  return FromRocks(db_->Write(wo, &batch), "put chunk");
}

Status MetaStore::MarkBad(const std::string& job, const format::ChunkId& id) {
  absl::MutexLock lock(&index_mu_);
  return FromRocks(db_->Put(rocksdb::WriteOptions(), BadKey(job, id), ""),
                   "mark chunk bad");
}

bool MetaStore::IsMarkedBad(const std::string& job, const format::ChunkId& id) {
  std::string v;
  return db_->Get(rocksdb::ReadOptions(), BadKey(job, id), &v).ok();
}

Result<ChunkMeta> MetaStore::GetChunk(const std::string& job,
                                      const format::ChunkId& id) {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ChunkKey(job, id), &v);
  if (s.IsNotFound()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job, "' has no chunk ", id.ToHex()));
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(s, "get chunk"));
  return DecodeChunkMeta(v);
}

Result<pb::StepInfo> MetaStore::GetStep(const std::string& job, int64_t step) {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), StepKey(job, step), &v);
  if (s.IsNotFound()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job, "' has no step ", step));
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(s, "get step"));
  return ParseValue<pb::StepInfo>(v, "step info");
}

Result<std::vector<std::string>> MetaStore::ListJobs() {
  std::set<std::string> jobs;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (char kind : {'s', 'c'}) {
    const std::string kind_prefix{kind, '/'};
    it->Seek(kind_prefix);
    while (it->Valid() && it->key().starts_with(kind_prefix)) {
      const std::string_view key(it->key().data(), it->key().size());
      const size_t end = key.find('\0', kind_prefix.size());
      if (end == std::string_view::npos) break;  // not a job's key
      std::string job(key.substr(kind_prefix.size(), end - kind_prefix.size()));
      // Past every key of this job: its prefix ends in '\0'.
      std::string next = JobPrefix(kind, job);
      next.back() = '\1';
      jobs.insert(std::move(job));
      it->Seek(next);
    }
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(it->status(), "list jobs"));
  return std::vector<std::string>(jobs.begin(), jobs.end());
}

Result<std::vector<pb::StepInfo>> MetaStore::ListSteps(const std::string& job,
                                                       bool include_partial) {
  std::vector<pb::StepInfo> out;
  std::string prefix = JobPrefix('s', job);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    STAGGER_ASSIGN_OR_RETURN(
        pb::StepInfo info,
        ParseValue<pb::StepInfo>(it->value().ToString(), "step info"));
    if (info.complete() || include_partial) out.push_back(std::move(info));
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(it->status(), "list steps"));
  return out;
}

Result<pb::StepInfo> MetaStore::LatestComplete(const std::string& job) {
  std::string prefix = JobPrefix('s', job);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  std::string upper = prefix;
  PutBE64(&upper, ~0ull);
  for (it->SeekForPrev(upper); it->Valid() && it->key().starts_with(prefix);
       it->Prev()) {
    STAGGER_ASSIGN_OR_RETURN(
        pb::StepInfo info,
        ParseValue<pb::StepInfo>(it->value().ToString(), "step info"));
    if (info.complete()) return info;
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(it->status(), "latest step"));
  return absl::NotFoundError(
      absl::StrCat("job '", job, "' has no complete step"));
}

Result<pb::ShardManifest> MetaStore::GetShard(const std::string& job,
                                              int64_t step, uint32_t rank) {
  std::string v;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), ShardKey(job, step, rank), &v);
  if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("job '", job, "' step ", step,
                                            " has no shard from rank ", rank));
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(s, "get shard"));
  return ParseValue<pb::ShardManifest>(v, "shard manifest");
}

class MetaStore::CollectingScope {
 public:
  CollectingScope(MetaStore* meta, const std::string& job)
      : meta_(meta), job_(job) {
    absl::MutexLock lock(&meta_->index_mu_);
    meta_->collecting_.insert(job_);
  }
  ~CollectingScope() {
    absl::MutexLock lock(&meta_->index_mu_);
    meta_->collecting_.erase(job_);
  }
  CollectingScope(const CollectingScope&) = delete;
  CollectingScope& operator=(const CollectingScope&) = delete;

 private:
  MetaStore* const meta_;
  const std::string job_;
};

Result<GcResult> MetaStore::DeleteStepsLocked(
    const std::string& job, const std::vector<pb::StepInfo>& steps,
    const std::set<int64_t>& doomed, int64_t grace_ms) {
  GcResult r;
  rocksdb::WriteBatch batch;
  std::vector<pb::StepInfo> kept;
  for (const auto& s : steps) {
    if (doomed.count(s.step()) != 0) {
      batch.Delete(StepKey(job, s.step()));
      batch.Delete(DrainedKey(job, s.step()));
      for (uint32_t rank : s.committed_ranks()) {
        batch.Delete(ShardKey(job, s.step(), rank));
      }
      DeleteMemoryShards(job, s.step(), &batch);
      r.steps_deleted.push_back(s.step());
    } else {
      kept.push_back(s);
    }
  }
  r.steps_kept = kept.size();
  // From before the scan of bases to the delete write, no rebase may point
  // a kept chunk at one found dead.
  CollectingScope collecting(this, job);
  ChunkIdSet live;
  STAGGER_RETURN_IF_ERROR(AddReferenced(job, kept, &live));
  STAGGER_RETURN_IF_ERROR(CloseOverBases(job, &live));
  if (collect_hook_) collect_hook_(job);
  STAGGER_ASSIGN_OR_RETURN(SweepResult swept,
                           DeleteUnreferenced(job, live, grace_ms, &batch));
  r.chunks_deleted = swept.chunks_deleted;
  r.bytes_freed = swept.bytes_freed;
  r.grace_kept = swept.grace_kept;
  return r;
}

Result<ChunkIdSet> MetaStore::LiveChunks(const std::string& job) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", job));
  absl::MutexLock lock(&commit_mu_);
  STAGGER_ASSIGN_OR_RETURN(auto steps,
                           ListSteps(job, /*include_partial=*/true));
  if (steps.empty()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job, "' has no steps on this server"));
  }
  ChunkIdSet live;
  STAGGER_RETURN_IF_ERROR(AddReferenced(job, steps, &live));
  STAGGER_RETURN_IF_ERROR(CloseOverBases(job, &live));
  return live;
}

Result<SweepResult> MetaStore::Sweep(const std::string& job, ChunkIdSet live,
                                     int64_t grace_ms) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", job));
  if (grace_ms < 0) return absl::InvalidArgumentError("grace must be >= 0");
  absl::MutexLock lock(&commit_mu_);  // no step appears while we decide
  STAGGER_ASSIGN_OR_RETURN(auto steps,
                           ListSteps(job, /*include_partial=*/true));
  if (!steps.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this server holds ", steps.size(), " steps of job '", job,
        "' (it is the job's coordinator): gc it there, not by sweep"));
  }
  CollectingScope collecting(this, job);
  STAGGER_RETURN_IF_ERROR(CloseOverBases(job, &live));
  if (collect_hook_) collect_hook_(job);
  rocksdb::WriteBatch batch;
  return DeleteUnreferenced(job, live, grace_ms, &batch);
}

Status MetaStore::AddShardChunks(const pb::ShardManifest& shard,
                                 ChunkIdSet* live) {
  for (const auto& t : shard.tensors()) {
    for (const auto& c : t.chunks()) {
      auto id = format::ChunkId::FromBytes(c.id());
      auto base = c.base_id().empty()
                      ? Result<format::ChunkId>(format::ChunkId{})
                      : format::ChunkId::FromBytes(c.base_id());
      if (!id.ok() || !base.ok()) {
        return absl::DataLossError(absl::StrCat(
            "job '", shard.job(), "' step ", shard.step(), " rank ",
            shard.rank(), " tensor '", t.name(), "': corrupt chunk id"));
      }
      live->insert(*id);
      if (!c.base_id().empty()) live->insert(*base);
    }
  }
  return absl::OkStatus();
}

Status MetaStore::AddReferenced(const std::string& job,
                                const std::vector<pb::StepInfo>& steps,
                                ChunkIdSet* live) {
  for (const auto& s : steps) {
    for (uint32_t rank : s.committed_ranks()) {
      STAGGER_ASSIGN_OR_RETURN(auto shard, GetShard(job, s.step(), rank));
      STAGGER_RETURN_IF_ERROR(AddShardChunks(shard, live));
    }
  }
  return AddSetAside(job, live);
}

Status MetaStore::CloseOverBases(const std::string& job, ChunkIdSet* live) {
  absl::flat_hash_map<format::ChunkId, format::ChunkId> base_of;
  std::string prefix = JobPrefix('c', job);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    // Unreadable entries name no base; DeleteUnreferenced drops them.
    auto id = format::ChunkId::FromBytes(
        std::string_view(it->key().data(), it->key().size())
            .substr(prefix.size()));
    auto meta = DecodeChunkMeta(it->value().ToString());
    if (id.ok() && meta.ok() && meta->base) base_of.emplace(*id, *meta->base);
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(it->status(), "scan for delta bases"));
  if (base_of.empty()) return absl::OkStatus();
  std::vector<format::ChunkId> work(live->begin(), live->end());
  while (!work.empty()) {
    format::ChunkId id = work.back();
    work.pop_back();
    auto b = base_of.find(id);
    if (b != base_of.end() && live->insert(b->second).second) {
      work.push_back(b->second);
    }
  }
  return absl::OkStatus();
}

Result<SweepResult> MetaStore::DeleteUnreferenced(const std::string& job,
                                                  const ChunkIdSet& live,
                                                  int64_t grace_ms,
                                                  rocksdb::WriteBatch* batch) {
  SweepResult r;
  const int64_t cutoff = NowMs() - grace_ms;
  std::string prefix = JobPrefix('c', job);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    auto id = format::ChunkId::FromBytes(
        std::string_view(it->key().data(), it->key().size())
            .substr(prefix.size()));
    if (id.ok() && live.contains(*id)) continue;
    auto meta = DecodeChunkMeta(it->value().ToString());
    // Recently written chunks may belong to a save not yet committed.
    if (meta.ok() && meta->written_unix_ms > cutoff) {
      ++r.grace_kept.chunks;
      r.grace_kept.bytes += meta->stored_length;
      r.grace_kept.until_unix_ms = std::max(r.grace_kept.until_unix_ms,
                                            meta->written_unix_ms + grace_ms);
      continue;
    }
    batch->Delete(it->key());
    ++r.chunks_deleted;
    if (meta.ok()) r.bytes_freed += meta->stored_length;
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(it->status(), "gc scan"));
  if (batch->Count() == 0) return r;  // nothing to write, nor to sync
  rocksdb::WriteOptions wo;
  wo.sync = true;
  // A relocation between the scan and this write is deleted with its
  // entry, which was unreferenced either way.
  absl::MutexLock lock(&index_mu_);
  STAGGER_RETURN_IF_ERROR(FromRocks(db_->Write(wo, batch), "gc"));
  return r;
}

Status MetaStore::ForEachChunk(
    const std::string& job,
    const std::function<void(const format::ChunkId&, const ChunkMeta&)>& fn) {
  std::string prefix = JobPrefix('c', job);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    std::string_view key(it->key().data(), it->key().size());
    auto id = format::ChunkId::FromBytes(key.substr(prefix.size()));
    auto meta = DecodeChunkMeta(it->value().ToString());
    if (!id.ok() || !meta.ok()) {
      return absl::DataLossError(absl::StrCat(
          "job '", job, "': corrupt chunk index entry (key of ", key.size(),
          " bytes, value of ", it->value().size(), " bytes)"));
    }
    fn(*id, *meta);
  }
  return FromRocks(it->status(), "chunk index scan");
}

Status MetaStore::Restore(const std::string& job,
                          const std::vector<Restored>& changes) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", job));
  rocksdb::WriteBatch batch;
  absl::MutexLock lock(&index_mu_);
  if (collecting_.contains(job)) {
    return absl::AbortedError(absl::StrCat(
        "job '", job, "' is being collected: its bases stay as they are"));
  }
  for (const Restored& c : changes) {
    const std::string key = ChunkKey(job, c.id);
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &v);
    if (s.IsNotFound()) {
      return absl::AbortedError(
          absl::StrCat("chunk ", c.id.ToHex(), " was collected meanwhile"));
    }
    STAGGER_RETURN_IF_ERROR(FromRocks(s, "get chunk"));
    STAGGER_ASSIGN_OR_RETURN(ChunkMeta now, DecodeChunkMeta(v));
    if (!(now.location == c.from)) {
      return absl::AbortedError(
          absl::StrCat("chunk ", c.id.ToHex(), " was moved meanwhile"));
    }
    ChunkMeta to = c.to;
    to.written_unix_ms = now.written_unix_ms;
    batch.Put(key, EncodeChunkMeta(to));
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch), "restore chunks");
}

Result<uint64_t> MetaStore::RelocateChunks(
    const std::string& job, const std::vector<Relocation>& moves) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", job));
  rocksdb::WriteBatch batch;
  uint64_t moved = 0;
  absl::MutexLock lock(&index_mu_);
  for (const Relocation& m : moves) {
    const std::string key = ChunkKey(job, m.id);
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &v);
    if (s.IsNotFound()) continue;  // collected meanwhile
    STAGGER_RETURN_IF_ERROR(FromRocks(s, "get chunk"));
    auto meta = DecodeChunkMeta(v);
    if (!meta.ok() || !(meta->location == m.from)) continue;
    meta->location = m.to;
    batch.Put(key, EncodeChunkMeta(*meta));
    ++moved;
  }
  if (moved == 0) return moved;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  STAGGER_RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "relocate"));
  return moved;
}

Status MetaStore::MarkDrained(const std::string& job, int64_t step) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Put(wo, DrainedKey(job, step), ""),
                   "mark a step drained");
}

Result<std::set<int64_t>> MetaStore::DrainedSteps(const std::string& job) {
  return TierSteps(job, false);
}

Result<std::set<int64_t>> MetaStore::ColdOnlySteps(const std::string& job) {
  return TierSteps(job, true);
}

Result<std::set<int64_t>> MetaStore::TierSteps(const std::string& job,
                                               bool cold_only) {
  const std::string prefix = JobPrefix('r', job);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  std::set<int64_t> out;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != prefix.size() + 8) {
      return absl::DataLossError("corrupt drained-step key");
    }
    if (cold_only && it->value() != kColdOnly) continue;
    uint64_t step = 0;
    for (size_t i = prefix.size(); i < k.size(); ++i) {
      step = step << 8 | static_cast<uint8_t>(k[i]);
    }
    out.insert(static_cast<int64_t>(step));
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(it->status(), "list drained steps"));
  return out;
}

Status MetaStore::ImportStep(const std::string& job, const pb::StepInfo& info,
                             const std::vector<pb::ShardManifest>& shards) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", job));
  if (static_cast<int>(shards.size()) != info.committed_ranks_size() ||
      info.committed_ranks_size() != static_cast<int>(info.world_size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", info.step(), " of job '", job, "': ", shards.size(),
        " manifests for ", info.committed_ranks_size(), " committed of ",
        info.world_size(), info.world_size() == 1 ? " rank" : " ranks"));
  }
  absl::MutexLock lock(&commit_mu_);
  std::string v;
  if (db_->Get(rocksdb::ReadOptions(), StepKey(job, info.step()), &v).ok()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "step ", info.step(), " of job '", job, "' is held here already"));
  }
  rocksdb::WriteBatch batch;
  for (const pb::ShardManifest& m : shards) {
    batch.Put(ShardKey(job, info.step(), m.rank()), m.SerializeAsString());
  }
  batch.Put(StepKey(job, info.step()), info.SerializeAsString());
  batch.Put(DrainedKey(job, info.step()), kColdOnly);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch), "import a step");
}

}  // namespace stagger::server
