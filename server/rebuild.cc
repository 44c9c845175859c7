#include "server/rebuild.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "format/codec.h"
#include "format/names.h"
#include "server/manifest_log.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"

namespace stagger::server {

Result<RebuildReport> RebuildIndex(const std::string& data_dir) {
  namespace fs = std::filesystem;
  RebuildReport report;
  std::error_code ec;
  const std::string meta_dir = data_dir + "/meta";
  if (!fs::is_directory(data_dir + "/segments", ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        data_dir, " has no segments/ directory: nothing to rebuild from"));
  }
  if (fs::exists(meta_dir, ec)) {
    // RocksDB's lock: a server still running on this directory holds it.
    auto in_use = MetaStore::Open(meta_dir);
    if (!in_use.ok() &&
        absl::AsciiStrToLower(in_use.status().message()).find("lock") !=
            std::string::npos) {
      return absl::FailedPreconditionError(
          absl::StrCat(meta_dir, " is in use (", in_use.status().message(),
                       "): stop the server first"));
    }
    in_use = nullptr;  // closed before it is moved
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    report.old_meta = absl::StrCat(meta_dir, ".before-rebuild-", now);
    fs::rename(meta_dir, report.old_meta, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot move ", meta_dir, " aside: ", ec.message()));
    }
  }
  STAGGER_ASSIGN_OR_RETURN(auto meta, MetaStore::Open(meta_dir));
  SegmentStoreOptions so;
  so.dir = data_dir + "/segments";
  STAGGER_ASSIGN_OR_RETURN(auto segments, SegmentStore::Open(so));

  std::set<std::string> jobs;
  for (const auto& e : fs::directory_iterator(so.dir, ec)) {
    if (e.is_directory() &&
        format::ValidateName("job", e.path().filename().string()).ok()) {
      jobs.insert(e.path().filename().string());
    }
  }
  const std::string logs = data_dir + "/manifests";
  for (const auto& e : fs::directory_iterator(logs, ec)) {
    if (e.path().extension() == ".log") jobs.insert(e.path().stem().string());
  }

  for (const std::string& job : jobs) {
    if (!format::ValidateName("job", job).ok()) continue;
    ++report.jobs;
    std::map<format::ChunkId, ChunkMeta> found;
    Status scanned = segments->Scan(
        job,
        [&](const format::RecordHeader& h, const ChunkLocation& loc) {
          ++report.segments_records;
          ChunkMeta m;
          m.location = loc;
          m.raw_length = h.raw_length;
          m.stored_length = h.encoded_length;
          m.codec = h.codec;
          found[h.chunk_id] = m;
        },
        [&](const Status& s) {
          ++report.torn;
          report.problems.push_back(
              absl::StrCat("job ", job, ": ", s.message()));
        });
    if (!scanned.ok() && !absl::IsNotFound(scanned)) {
      return WithContext(scanned, absl::StrCat("scan of job ", job));
    }
    for (auto& [id, m] : found) {
      if (format::IsDelta(m.codec)) {
        auto rec = segments->Read(job, m.location);
        auto base = rec.ok() ? format::DeltaBase(rec->payload.view())
                             : Result<format::ChunkId>(rec.status());
        if (!base.ok()) {
          report.problems.push_back(
              absl::StrCat("job ", job, " chunk ", id.ToHex(),
                           ": delta base unreadable, not indexed: ",
                           base.status().message()));
          continue;
        }
        m.base = *base;
      }
      STAGGER_RETURN_IF_ERROR(meta->PutChunk(job, id, m));
      ++report.chunks;
    }
    STAGGER_ASSIGN_OR_RETURN(ManifestLog::Contents log,
                             ManifestLog::Read(logs + "/" + job + ".log"));
    if (log.ignored_bytes > 0) {
      report.problems.push_back(
          absl::StrCat("job ", job, ": manifest log ends in ",
                       log.ignored_bytes, " torn or corrupt bytes, ignored"));
    }
    std::set<int64_t> complete;
    std::set<format::ChunkId> missing;
    for (const pb::ShardManifest& m : log.manifests) {
      if (m.job() != job) {
        ++report.manifests_refused;
        report.problems.push_back(absl::StrCat(
            "job ", job, ": log holds a manifest of job '", m.job(), "'"));
        continue;
      }
      auto info = meta->CommitShard(m, /*chunks_elsewhere=*/true);
      if (!info.ok()) {
        ++report.manifests_refused;
        report.problems.push_back(absl::StrCat("job ", job, " step ", m.step(),
                                               " rank ", m.rank(), ": ",
                                               info.status().message()));
        continue;
      }
      ++report.manifests;
      if (info->complete()) complete.insert(info->step());
      for (const pb::TensorEntry& t : m.tensors()) {
        for (const pb::ChunkRef& c : t.chunks()) {
          auto id = format::ChunkId::FromBytes(c.id());
          if (id.ok() && !meta->GetChunk(job, *id).ok()) missing.insert(*id);
        }
      }
    }
    report.steps_complete += complete.size();
    report.chunks_elsewhere += missing.size();
  }
  return report;
}

}  // namespace stagger::server
