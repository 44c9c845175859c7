#include "server/tier/cold_gc.h"

#include <functional>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "format/chunk_id.h"
#include "format/manifest.pb.h"
#include "format/record.h"
#include "server/tier/layout.h"

namespace stagger::server::tier {
namespace {

using IdSet = absl::flat_hash_set<format::ChunkId>;

// The chunks the manifests of `step` name.
Status AddStepChunks(ObjectStore* store, const std::string& job, int64_t step,
                     IdSet* live) {
  STAGGER_ASSIGN_OR_RETURN(std::string bytes,
                           store->Get(StepObject(job, step)));
  pb::StepInfo info;
  if (!info.ParseFromString(bytes)) {
    return absl::DataLossError(
        absl::StrCat("object ", StepObject(job, step).name, " of job ", job,
                     " does not parse: nothing collected"));
  }
  for (uint32_t rank : info.committed_ranks()) {
    const ObjectName o = ManifestObject(job, step, rank);
    STAGGER_ASSIGN_OR_RETURN(std::string m_bytes, store->Get(o));
    pb::ShardManifest m;
    if (!m.ParseFromString(m_bytes)) {
      return absl::DataLossError(absl::StrCat("object ", o.name, " of job ",
                                              job,
                                              " does not parse: nothing "
                                              "collected"));
    }
    for (const pb::TensorEntry& t : m.tensors()) {
      for (const pb::ChunkRef& c : t.chunks()) {
        STAGGER_ASSIGN_OR_RETURN(format::ChunkId id,
                                 format::ChunkId::FromBytes(c.id()));
        live->insert(id);
      }
    }
  }
  return absl::OkStatus();
}

// Adds the bases the stored records of `live` name, transitively.
Status CloseOverBases(ObjectStore* store, const std::string& job, IdSet* live) {
  std::vector<format::ChunkId> pending(live->begin(), live->end());
  while (!pending.empty()) {
    const format::ChunkId id = pending.back();
    pending.pop_back();
    // The header and, for a delta, the width byte and the base id.
    Result<transport::Buffer> head =
        store->Read(ChunkObject(job, id),
                    transport::Buffer(format::kRecordHeaderSize + 17));
    if (absl::IsNotFound(head.status())) continue;  // not drained (yet)
    STAGGER_RETURN_IF_ERROR(head.status());
    Result<format::RecordHeader> h = format::DecodeRecordHeader(head->view());
    if (!h.ok() || !format::IsDelta(h->codec)) continue;
    if (head->size() < format::kRecordHeaderSize + 17) continue;
    STAGGER_ASSIGN_OR_RETURN(format::ChunkId base,
                             format::ChunkId::FromBytes(head->view().substr(
                                 format::kRecordHeaderSize + 1, 16)));
    if (live->insert(base).second) pending.push_back(base);
  }
  return absl::OkStatus();
}

// Deletes the steps `pick` chooses among the job's steps in the store,
// then the chunks the others do not need, past their grace. A job without
// steps is left alone unless `without_steps`.
Result<ColdGcResult> Collect(
    ObjectStore* store, const std::string& job,
    const std::function<std::set<int64_t>(const std::set<int64_t>&)>& pick,
    bool without_steps, int64_t grace_s, int64_t now_unix_s) {
  ColdGcResult r;
  // One listing of the namespace (RADOS lists by scanning it).
  STAGGER_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           store->List(job, ""));
  std::set<int64_t> steps;
  for (const std::string& n : names) {
    if (auto s = StepOfObject(n)) steps.insert(*s);
  }
  // A job with no step in the store: its chunks may belong to a drain
  // that has not written its first step yet.
  if (steps.empty() && !without_steps) return r;
  const std::set<int64_t> doomed = pick(steps);
  // What the kept steps need, before anything is deleted: a kept step
  // whose objects cannot be read stops the gc.
  IdSet live;
  for (int64_t step : steps) {
    if (doomed.count(step) != 0) continue;
    STAGGER_RETURN_IF_ERROR(AddStepChunks(store, job, step, &live));
  }
  STAGGER_RETURN_IF_ERROR(CloseOverBases(store, job, &live));
  // Step objects first: a step half deleted is never listed.
  for (int64_t step : doomed) {
    STAGGER_RETURN_IF_ERROR(store->Remove(StepObject(job, step)));
    r.steps_deleted.push_back(step);
  }
  for (const std::string& name : names) {
    const std::optional<int64_t> of_step = StepOfManifest(name);
    if (of_step && doomed.count(*of_step) != 0) {
      STAGGER_RETURN_IF_ERROR(store->Remove({job, name}));
      continue;
    }
    const std::optional<format::ChunkId> id = ChunkOfObject(name);
    if (!id || live.contains(*id)) continue;
    const ObjectName o{job, name};
    STAGGER_ASSIGN_OR_RETURN(std::optional<ObjectInfo> info, store->Stat(o));
    if (!info) continue;
    // No grace spares nothing: a store's clock (S3's Last-Modified, whole
    // seconds, perhaps rounded up) may put a chunk written a moment ago
    // ahead of ours.
    if (grace_s > 0 && now_unix_s - info->written_unix_s < grace_s) {
      ++r.grace_kept;
      continue;
    }
    STAGGER_RETURN_IF_ERROR(store->Remove(o));
    ++r.chunks_deleted;
    r.bytes_freed += info->size;
  }
  return r;
}

}  // namespace

Result<ColdGcResult> GcColdJob(ObjectStore* store, const std::string& job,
                               uint32_t keep, int64_t grace_s,
                               int64_t now_unix_s) {
  if (keep == 0) {
    return absl::InvalidArgumentError("--rados-keep must keep a step");
  }
  auto oldest = [keep](const std::set<int64_t>& steps) {
    const auto first_kept =
        steps.size() > keep ? std::prev(steps.end(), keep) : steps.begin();
    return std::set<int64_t>(steps.begin(), first_kept);
  };
  return Collect(store, job, oldest, /*without_steps=*/false, grace_s,
                 now_unix_s);
}

Result<ColdGcResult> RemoveColdSteps(ObjectStore* store, const std::string& job,
                                     const std::vector<int64_t>& steps,
                                     bool all, int64_t grace_s,
                                     int64_t now_unix_s) {
  auto named = [&](const std::set<int64_t>& held) {
    if (all) return held;
    std::set<int64_t> out;
    for (int64_t s : steps) {
      if (held.count(s) != 0) out.insert(s);
    }
    return out;
  };
  return Collect(store, job, named, /*without_steps=*/all, grace_s, now_unix_s);
}

}  // namespace stagger::server::tier
