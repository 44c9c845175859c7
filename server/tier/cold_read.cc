#include "server/tier/cold_read.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "format/record.h"
#include "server/tier/layout.h"
#include "transport/buffer.h"
#include "transport/buffer_pool.h"
#include "util/log.h"

namespace stagger::server::tier {

Result<StoredRecord> ReadColdChunk(ObjectStore* store, const std::string& job,
                                   const format::ChunkId& id,
                                   std::optional<uint64_t> size,
                                   transport::BufferPool* pool) {
  const ObjectName object = ChunkObject(job, id);
  auto buffer = [pool](uint64_t n) {
    return pool != nullptr ? pool->Get(n) : transport::Buffer(n);
  };
  transport::Buffer bytes;
  if (size) {
    STAGGER_ASSIGN_OR_RETURN(bytes, store->Read(object, buffer(*size)));
    // A size from a hint that falls short of the record (re-encoded since
    // the hint's manifest was written): the record read whole.
    Result<format::RecordHeader> first =
        format::DecodeRecordHeader(bytes.view());
    if (first.ok() && bytes.size() == *size &&
        first->encoded_length <= format::kMaxChunkEncodedBytes &&
        format::kRecordHeaderSize + first->encoded_length > *size) {
      STAGGER_ASSIGN_OR_RETURN(
          bytes, store->Read(object, buffer(format::kRecordHeaderSize +
                                            first->encoded_length)));
    }
  } else {
    STAGGER_ASSIGN_OR_RETURN(std::string whole, store->Get(object));
    bytes = transport::Buffer::CopyOf(whole);
  }
  auto bad = [&](std::string_view why) {
    return absl::DataLossError(absl::StrCat(store->Describe(), ": object ",
                                            object.name, " of job ", job, ": ",
                                            AsAbsl(why)));
  };
  Result<format::RecordHeader> h = format::DecodeRecordHeader(bytes.view());
  if (!h.ok()) return bad(std::string(h.status().message()));
  if (bytes.size() != format::kRecordHeaderSize + h->encoded_length) {
    return bad(absl::StrCat("holds ", bytes.size(), " bytes, its header says ",
                            format::kRecordHeaderSize + h->encoded_length));
  }
  const std::string_view payload =
      bytes.view().substr(format::kRecordHeaderSize);
  if (Status s = format::VerifyPayload(*h, payload); !s.ok()) {
    return bad(std::string(s.message()));
  }
  if (h->chunk_id != id) {
    return bad(absl::StrCat("a record of chunk ", h->chunk_id.ToHex()));
  }
  StoredRecord rec;
  rec.header = *h;
  rec.payload = std::move(bytes);  // sent from where it was read
  rec.payload.DropFront(format::kRecordHeaderSize);
  return rec;
}

namespace {

// Reads step `step` of `job` and its manifests from the store.
Status ImportStep(MetaStore* meta, ObjectStore* store, const std::string& job,
                  int64_t step) {
  STAGGER_ASSIGN_OR_RETURN(std::string info_bytes,
                           store->Get(StepObject(job, step)));
  pb::StepInfo info;
  if (!info.ParseFromString(info_bytes) || info.step() != step) {
    return absl::DataLossError(absl::StrCat(
        "object ", StepObject(job, step).name, " is not that step's record"));
  }
  std::vector<pb::ShardManifest> shards;
  for (uint32_t rank : info.committed_ranks()) {
    const ObjectName o = ManifestObject(job, step, rank);
    STAGGER_ASSIGN_OR_RETURN(std::string bytes, store->Get(o));
    pb::ShardManifest m;
    if (!m.ParseFromString(bytes) || m.job() != job || m.step() != step ||
        m.rank() != rank) {
      return absl::DataLossError(
          absl::StrCat("object ", o.name, " is not that rank's manifest"));
    }
    shards.push_back(std::move(m));
  }
  return meta->ImportStep(job, info, shards);
}

}  // namespace

Result<ImportStats> ImportColdSteps(MetaStore* meta, ObjectStore* store,
                                    const ImportOptions& options) {
  ImportStats stats;
  STAGGER_ASSIGN_OR_RETURN(std::vector<std::string> jobs, store->Namespaces());
  for (const std::string& job : jobs) {
    STAGGER_ASSIGN_OR_RETURN(std::vector<std::string> names,
                             store->List(job, std::string(kStepPrefix)));
    std::set<int64_t> steps;
    for (const std::string& n : names) {
      if (auto step = StepOfObject(n)) steps.insert(*step);
    }
    bool any = false;
    for (int64_t step : steps) {
      if (meta->GetStep(job, step).ok()) continue;  // held here
      if (options.refused != nullptr && options.refused->count({job, step})) {
        continue;
      }
      if (options.guard != nullptr && !options.guard->TryLock()) {
        ++stats.deferred;
        continue;
      }
      // Checked again under the guard: a deletion may have just ended.
      Status s = meta->GetStep(job, step).ok()
                     ? absl::AlreadyExistsError("held here")
                     : ImportStep(meta, store, job, step);
      if (options.guard != nullptr) options.guard->Unlock();
      if (absl::IsUnavailable(s)) return s;
      if (absl::IsAlreadyExists(s) || absl::IsNotFound(s)) continue;
      if (!s.ok()) {
        ++stats.refused;
        if (options.refused != nullptr) options.refused->insert({job, step});
        log::Warning("stagger-server",
                     absl::StrCat("cold store: job '", job, "' step ", step,
                                  " left out: ", s.message()));
        continue;
      }
      ++stats.steps;
      any = true;
    }
    if (any) ++stats.jobs;
  }
  return stats;
}

}  // namespace stagger::server::tier
