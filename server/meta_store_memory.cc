// MetaStore: the records of memory-level shards the servers confirm on
// disk themselves (server/promoter.h), and setting such shards aside when
// a server starts.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/internal/meta_keys.h"
#include "server/meta_store.h"

namespace stagger::server {

using meta_internal::DrainedKey;
using meta_internal::FromRocks;
using meta_internal::JobPrefix;
using meta_internal::MemoryShardKey;
using meta_internal::MemoryShardPrefix;
using meta_internal::ParseValue;
using meta_internal::ShardKey;
using meta_internal::StepKey;

namespace {

uint64_t GetBE(std::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  }
  return v;
}

// Bytes a shard added to its step's totals when it was committed.
uint64_t StoredBytes(const pb::ShardManifest& m) {
  uint64_t n = 0;
  for (const auto& t : m.tensors()) {
    for (const auto& c : t.chunks()) n += c.stored_length();
  }
  return n;
}
uint64_t RawBytes(const pb::ShardManifest& m) {
  uint64_t n = 0;
  for (const auto& t : m.tensors()) n += t.byte_size();
  return n;
}

}  // namespace

Result<std::vector<MetaStore::MemoryShardRecord>> MetaStore::MemoryShards() {
  std::vector<MemoryShardRecord> out;
  const std::string kind = "p/";
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(kind); it->Valid() && it->key().starts_with(kind); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    const size_t end = key.find('\0', kind.size());
    if (end == std::string_view::npos || key.size() != end + 1 + 8 + 4) {
      return absl::DataLossError("corrupt memory-level shard key");
    }
    MemoryShardRecord r;
    r.job = std::string(key.substr(kind.size(), end - kind.size()));
    r.step = static_cast<int64_t>(GetBE(key, end + 1, 8));
    r.rank = static_cast<uint32_t>(GetBE(key, end + 9, 4));
    STAGGER_ASSIGN_OR_RETURN(r.shard,
                             ParseValue<pb::MemoryShard>(it->value().ToString(),
                                                         "memory-level shard"));
    out.push_back(std::move(r));
  }
  STAGGER_RETURN_IF_ERROR(FromRocks(it->status(), "memory-level shards"));
  return out;
}

Status MetaStore::ForgetMemoryShard(const std::string& job, int64_t step,
                                    uint32_t rank) {
  absl::MutexLock lock(&commit_mu_);
  rocksdb::WriteBatch batch;
  batch.Delete(MemoryShardKey(job, step, rank));
  // A step that was only set-aside shards is gone with the last of them.
  auto info = GetStep(job, step);
  if (info.ok() && info->committed_ranks().empty()) {
    const std::string prefix = MemoryShardPrefix(job, step);
    const std::string self = MemoryShardKey(job, step, rank);
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions()));
    bool others = false;
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
         it->Next()) {
      others = others || it->key().ToString() != self;
    }
    if (!others) {
      batch.Delete(StepKey(job, step));
      batch.Delete(DrainedKey(job, step));
    }
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch), "forget memory-level shard");
}

Result<std::map<std::string, std::vector<int64_t>>>
MetaStore::SetAsideMemoryShards() {
  std::map<std::string, std::vector<int64_t>> set_aside;
  STAGGER_ASSIGN_OR_RETURN(std::vector<std::string> jobs, ListJobs());
  absl::MutexLock lock(&commit_mu_);
  rocksdb::WriteBatch batch;
  for (const std::string& job : jobs) {
    STAGGER_ASSIGN_OR_RETURN(auto steps,
                             ListSteps(job, /*include_partial=*/true));
    for (pb::StepInfo info : steps) {
      if (info.memory_ranks().empty()) continue;
      for (uint32_t rank : info.memory_ranks()) {
        STAGGER_ASSIGN_OR_RETURN(pb::ShardManifest m,
                                 GetShard(job, info.step(), rank));
        pb::MemoryShard rec;
        std::string v;
        if (db_->Get(rocksdb::ReadOptions(),
                     MemoryShardKey(job, info.step(), rank), &v)
                .ok()) {
          STAGGER_ASSIGN_OR_RETURN(
              rec, ParseValue<pb::MemoryShard>(v, "memory-level shard"));
        }
        *rec.mutable_set_aside() = m;
        batch.Put(MemoryShardKey(job, info.step(), rank),
                  rec.SerializeAsString());
        batch.Delete(ShardKey(job, info.step(), rank));
        auto& ranks = *info.mutable_committed_ranks();
        ranks.erase(std::remove(ranks.begin(), ranks.end(), rank), ranks.end());
        info.set_raw_bytes(info.raw_bytes() -
                           std::min(info.raw_bytes(), RawBytes(m)));
        info.set_stored_bytes(info.stored_bytes() -
                              std::min(info.stored_bytes(), StoredBytes(m)));
        const uint64_t shipped = m.stats().bytes_shipped();
        info.set_shipped_bytes(info.shipped_bytes() -
                               std::min(info.shipped_bytes(), shipped));
      }
      info.clear_memory_ranks();
      info.set_complete(false);
      info.set_completed_unix_ms(0);
      batch.Put(StepKey(job, info.step()), info.SerializeAsString());
      set_aside[job].push_back(info.step());
    }
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  STAGGER_RETURN_IF_ERROR(
      FromRocks(db_->Write(wo, &batch), "set memory-level shards aside"));
  return set_aside;
}

Status MetaStore::AddSetAside(const std::string& job, ChunkIdSet* live) {
  const std::string prefix = JobPrefix('p', job);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    STAGGER_ASSIGN_OR_RETURN(pb::MemoryShard rec,
                             ParseValue<pb::MemoryShard>(it->value().ToString(),
                                                         "memory-level shard"));
    if (rec.has_set_aside()) {
      STAGGER_RETURN_IF_ERROR(AddShardChunks(rec.set_aside(), live));
    }
  }
  return FromRocks(it->status(), "memory-level shards");
}

void MetaStore::DeleteMemoryShards(const std::string& job, int64_t step,
                                   rocksdb::WriteBatch* batch) {
  const std::string prefix = MemoryShardPrefix(job, step);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    batch->Delete(it->key());
  }
}

}  // namespace stagger::server
