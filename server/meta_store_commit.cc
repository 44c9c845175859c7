// MetaStore's commits (meta_store.h): one shard or a group of them, each
// group in one synced RocksDB batch.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "format/manifest.h"
#include "server/internal/meta_keys.h"
#include "server/meta_store.h"

namespace stagger::server {

using meta_internal::FromRocks;
using meta_internal::MemoryShardKey;
using meta_internal::ShardKey;
using meta_internal::StepKey;

namespace {

// Fills `c`'s stored description from this server's index (codec, stored
// length, delta base: the index's word, not the client's) and returns its
// stored length. A chunk the index lacks is refused, unless it is stored
// on another server (`elsewhere`): its description then stands once it is
// consistent.
Result<uint64_t> ResolveChunk(MetaStore& store, const std::string& job,
                              const std::string& tensor, bool elsewhere,
                              const MetaStore::HeldLookup& held,
                              pb::ChunkRef* c) {
  const format::ChunkId id = *format::ChunkId::FromBytes(c->id());
  auto meta = store.GetChunk(job, id);
  if (absl::IsNotFound(meta.status()) && held) {
    if (std::optional<ChunkMeta> m = held(job, id)) meta = *m;
  }
  if (absl::IsNotFound(meta.status()) && elsewhere) {
    const bool delta = c->codec() < format::kCodecCount &&
                       format::IsDelta(static_cast<format::Codec>(c->codec()));
    if (delta == c->base_id().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor, "' chunk ", id.ToHex(),
                       ": a base id must be given exactly for delta chunks "
                       "(codecs 3 and 4)"));
    }
    if (c->stored_length() > format::kMaxChunkEncodedBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor, "' chunk ", id.ToHex(), ": stored length ",
          c->stored_length(), " exceeds ", format::kMaxChunkEncodedBytes));
    }
    return c->stored_length();
  }
  if (absl::IsNotFound(meta.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", tensor, "' references chunk ", id.ToHex(),
                     " which is not stored on this server"));
  }
  STAGGER_RETURN_IF_ERROR(meta.status());
  if (meta->raw_length != c->raw_length()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor, "' chunk ", id.ToHex(), " has ", meta->raw_length,
        " raw bytes stored, manifest says ", c->raw_length()));
  }
  c->set_codec(static_cast<uint32_t>(meta->codec));
  c->set_stored_length(meta->stored_length);
  if (meta->base) {
    c->set_base_id(meta->base->ToBytes());
  } else {
    c->clear_base_id();
  }
  return meta->stored_length;
}

// Whether two commits of one rank's shard are the same save (its stats and
// creation time aside, and what the server fills in from its index, which
// write-behind and rebasing change between a memory-level commit and the
// disk-level one): a retried commit, or a promotion.
bool SameShard(pb::ShardManifest a, pb::ShardManifest b) {
  for (pb::ShardManifest* m : {&a, &b}) {
    m->clear_stats();
    m->clear_created_unix_ms();
    m->clear_in_memory();
    for (pb::TensorEntry& t : *m->mutable_tensors()) {
      for (pb::ChunkRef& c : *t.mutable_chunks()) {
        c.clear_codec();
        c.clear_stored_length();
        c.clear_base_id();
      }
    }
  }
  return a.SerializeAsString() == b.SerializeAsString();
}

}  // namespace

Result<pb::StepInfo> MetaStore::StepToCommit(const pb::ShardManifest& m) {
  auto existing = GetStep(m.job(), m.step());
  if (existing.ok()) {
    if (existing->world_size() != m.world_size()) {
      return absl::AbortedError(absl::StrCat(
          "step ", m.step(), " of job '", m.job(), "' has world size ",
          existing->world_size(), ", commit says ", m.world_size()));
    }
    return existing;
  }
  if (!absl::IsNotFound(existing.status())) return existing.status();
  pb::StepInfo info;
  info.set_step(m.step());
  info.set_world_size(m.world_size());
  info.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  return info;
}

Result<pb::StepInfo> MetaStore::CommitShard(pb::ShardManifest m,
                                            bool chunks_elsewhere,
                                            const HeldLookup& held,
                                            const pb::MemoryShard* plan) {
  std::vector<CommitArgs> one(1);
  one[0].manifest = std::move(m);
  one[0].chunks_elsewhere = chunks_elsewhere;
  one[0].held = held;
  one[0].plan = plan;
  return std::move(CommitShards(one)[0]);
}

std::vector<Result<pb::StepInfo>> MetaStore::CommitShards(
    std::vector<CommitArgs>& commits) {
  std::vector<Result<pb::StepInfo>> out;
  std::vector<uint64_t> raw(commits.size()), stored(commits.size());
  for (size_t i = 0; i < commits.size(); ++i) {
    out.push_back(Resolve(commits[i], &raw[i], &stored[i]));
  }
  absl::MutexLock lock(&commit_mu_);
  // Each step's state as the group leaves it, and the shards committed by
  // the group so far (a rank committed twice in one group).
  using StepRef = std::pair<std::string, int64_t>;
  std::map<StepRef, pb::StepInfo> steps;
  std::map<std::tuple<std::string, int64_t, uint32_t>, pb::ShardManifest>
      shards;
  rocksdb::WriteBatch batch;
  std::vector<size_t> written;
  std::set<StepRef> changed;
  for (size_t i = 0; i < commits.size(); ++i) {
    if (!out[i].ok()) continue;
    const pb::ShardManifest& m = commits[i].manifest;
    const StepRef ref{m.job(), m.step()};
    auto it = steps.find(ref);
    if (it == steps.end()) {
      Result<pb::StepInfo> info = StepToCommit(m);
      if (!info.ok()) {
        out[i] = info.status();
        continue;
      }
      it = steps.emplace(ref, std::move(*info)).first;
    } else if (it->second.world_size() != m.world_size()) {
      out[i] = absl::AbortedError(absl::StrCat(
          "step ", m.step(), " of job '", m.job(), "' has world size ",
          it->second.world_size(), ", commit says ", m.world_size()));
      continue;
    }
    bool wrote = false;
    out[i] = Apply(commits[i], raw[i], stored[i], &it->second, &shards, &batch,
                   &wrote);
    if (out[i].ok() && wrote) {
      written.push_back(i);
      changed.insert(ref);
    }
  }
  if (written.empty()) return out;
  // Each step's state once, as the group leaves it.
  for (const StepRef& ref : changed) {
    batch.Put(StepKey(ref.first, ref.second), steps[ref].SerializeAsString());
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  Status s = FromRocks(db_->Write(wo, &batch), "commit");
  if (!s.ok()) {
    for (size_t i : written) out[i] = s;
  }
  return out;
}

Result<pb::StepInfo> MetaStore::Resolve(CommitArgs& c, uint64_t* raw,
                                        uint64_t* stored) {
  pb::ShardManifest& m = c.manifest;
  STAGGER_RETURN_IF_ERROR(format::ValidateShardManifest(m));
  *raw = *stored = 0;
  for (pb::TensorEntry& t : *m.mutable_tensors()) {
    *raw += t.byte_size();
    for (pb::ChunkRef& ref : *t.mutable_chunks()) {
      STAGGER_ASSIGN_OR_RETURN(
          uint64_t n,
          ResolveChunk(*this, m.job(), t.name(), c.chunks_elsewhere,
                       m.in_memory() ? c.held : HeldLookup(), &ref));
      *stored += n;
    }
  }
  return pb::StepInfo();
}

Result<pb::StepInfo> MetaStore::Apply(
    const CommitArgs& c, uint64_t raw, uint64_t stored, pb::StepInfo* info,
    std::map<std::tuple<std::string, int64_t, uint32_t>, pb::ShardManifest>*
        shards,
    rocksdb::WriteBatch* batch, bool* wrote) {
  const pb::ShardManifest& m = c.manifest;
  const std::string& job = m.job();
  const auto key = std::make_tuple(job, m.step(), m.rank());
  auto& ranks = *info->mutable_committed_ranks();
  auto& in_memory = *info->mutable_memory_ranks();
  if (std::find(ranks.begin(), ranks.end(), m.rank()) != ranks.end()) {
    pb::ShardManifest prior;
    if (auto it = shards->find(key); it != shards->end()) {
      prior = it->second;
    } else {
      STAGGER_ASSIGN_OR_RETURN(prior, GetShard(job, m.step(), m.rank()));
    }
    if (!SameShard(prior, m)) {
      return absl::AbortedError(absl::StrCat(
          "rank ", m.rank(), " already committed a different shard ",
          "for step ", m.step(), " of job '", job, "'"));
    }
    if (!prior.in_memory() || m.in_memory()) return *info;
    // The rank's chunks are on disk now: the shard becomes disk-level.
    in_memory.erase(std::remove(in_memory.begin(), in_memory.end(), m.rank()),
                    in_memory.end());
    prior.set_in_memory(false);
    // Its chunks as the index has them now.
    *prior.mutable_tensors() = m.tensors();
    batch->Put(ShardKey(job, m.step(), m.rank()), prior.SerializeAsString());
    batch->Delete(MemoryShardKey(job, m.step(), m.rank()));
    (*shards)[key] = std::move(prior);
    *wrote = true;
    return *info;
  }
  ranks.Add(m.rank());
  std::sort(ranks.begin(), ranks.end());
  if (m.in_memory()) {
    in_memory.Add(m.rank());
    std::sort(in_memory.begin(), in_memory.end());
  }
  info->set_raw_bytes(info->raw_bytes() + raw);
  info->set_stored_bytes(info->stored_bytes() + stored);
  info->set_shipped_bytes(info->shipped_bytes() + m.stats().bytes_shipped());
  if (static_cast<uint32_t>(ranks.size()) == info->world_size()) {
    info->set_complete(true);
    info->set_completed_unix_ms(absl::ToUnixMillis(absl::Now()));
  }
  batch->Put(ShardKey(job, m.step(), m.rank()), m.SerializeAsString());
  if (!m.in_memory()) {
    batch->Delete(MemoryShardKey(job, m.step(), m.rank()));  // set aside
  } else if (c.plan != nullptr && !c.plan->servers().empty()) {
    batch->Put(MemoryShardKey(job, m.step(), m.rank()),
               c.plan->SerializeAsString());
  }
  (*shards)[key] = m;
  *wrote = true;
  return *info;
}

}  // namespace stagger::server
