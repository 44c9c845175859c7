#include "server/rebuild.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "format/codec.h"
#include "format/names.h"
#include "server/manifest_log.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"

namespace stagger::server {

namespace {

// Which of a chunk's records to index. Any record of a chunk decodes to
// the same bytes, but a delta's base must resolve: records the index no
// longer pointed at survive until compaction (a forward delta the rebaser
// replaced, a copy whose relocation lost a race), and choosing by segment
// order alone could close a cycle (A a delta of B, B of A). So: the last
// whole record when one survives, else the last delta whose base resolves
// without coming back to it.
class RecordChooser {
 public:
  using Found = std::map<format::ChunkId, std::vector<ChunkMeta>>;
  RecordChooser(SegmentStore* segments, const std::string& job, Found* found,
                std::vector<std::string>* problems)
      : segments_(segments), job_(job), found_(found), problems_(problems) {}

  // nullptr when no record of `id` resolves (reported).
  const ChunkMeta* Choose(const format::ChunkId& id) {
    auto it = found_->find(id);
    if (it == found_->end()) return nullptr;
    auto [state, inserted] = state_.try_emplace(id, kVisiting);
    if (!inserted) {
      if (state->second == kVisiting || state->second == kNone) return nullptr;
      return &it->second[state->second];
    }
    std::vector<ChunkMeta>& records = it->second;
    for (size_t i = records.size(); i-- > 0;) {
      if (!format::IsDelta(records[i].codec)) return Chose(id, i);
    }
    std::string why = "no record";
    for (size_t i = records.size(); i-- > 0;) {
      auto rec = segments_->Read(job_, records[i].location);
      auto base = rec.ok() ? format::DeltaBase(rec->payload.view())
                           : Result<format::ChunkId>(rec.status());
      if (!base.ok()) {
        why = absl::StrCat("delta base unreadable: ", base.status().message());
        continue;
      }
      records[i].base = *base;
      // A base held elsewhere cannot close a cycle here.
      if (found_->count(*base) == 0 || Choose(*base) != nullptr) {
        return Chose(id, i);
      }
      why = absl::StrCat("its base ", base->ToHex(), " does not resolve");
    }
    state_[id] = kNone;
    problems_->push_back(absl::StrCat("job ", job_, " chunk ", id.ToHex(),
                                      ": not indexed: ", why));
    return nullptr;
  }

 private:
  static constexpr int64_t kVisiting = -1, kNone = -2;
  const ChunkMeta* Chose(const format::ChunkId& id, size_t i) {
    state_[id] = static_cast<int64_t>(i);
    return &(*found_)[id][i];
  }

  SegmentStore* segments_;
  const std::string& job_;
  Found* found_;
  std::vector<std::string>* problems_;
  std::map<format::ChunkId, int64_t> state_;
};

// Moves an existing metadata directory aside (refused while a server holds
// it), naming where in `report`.
Status MoveMetaAside(const std::string& meta_dir, RebuildReport* report) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(meta_dir, ec)) return absl::OkStatus();
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
  report->old_meta = absl::StrCat(meta_dir, ".before-rebuild-", now);
  fs::rename(meta_dir, report->old_meta, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot move ", meta_dir, " aside: ", ec.message()));
  }
  return absl::OkStatus();
}

// The jobs with a segment directory or a manifest log.
std::set<std::string> JobsIn(const std::string& segments,
                             const std::string& logs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::set<std::string> jobs;
  for (const auto& e : fs::directory_iterator(segments, ec)) {
    if (e.is_directory()) jobs.insert(e.path().filename().string());
  }
  for (const auto& e : fs::directory_iterator(logs, ec)) {
    if (e.path().extension() == ".log") jobs.insert(e.path().stem().string());
  }
  for (auto it = jobs.begin(); it != jobs.end();) {
    it = format::ValidateName("job", *it).ok() ? std::next(it) : jobs.erase(it);
  }
  return jobs;
}

// Indexes the one record of each chunk of `job` its segments hold intact
// (RecordChooser picks among several).
Status IndexRecords(const std::string& job, SegmentStore* segments,
                    MetaStore* meta, RebuildReport* report) {
  // Every intact record of each chunk, in segment order.
  std::map<format::ChunkId, std::vector<ChunkMeta>> found;
  Status scanned = segments->Scan(
      job,
      [&](const format::RecordHeader& h, const ChunkLocation& loc) {
        ++report->segments_records;
        ChunkMeta m;
        m.location = loc;
        m.raw_length = h.raw_length;
        m.stored_length = h.encoded_length;
        m.codec = h.codec;
        found[h.chunk_id].push_back(m);
      },
      [&](const Status& s) {
        ++report->torn;
        report->problems.push_back(
            absl::StrCat("job ", job, ": ", s.message()));
      });
  if (!scanned.ok() && !absl::IsNotFound(scanned)) {
    return WithContext(scanned, absl::StrCat("scan of job ", job));
  }
  RecordChooser chooser(segments, job, &found, &report->problems);
  for (const auto& [id, records] : found) {
    const ChunkMeta* m = chooser.Choose(id);
    if (m == nullptr) continue;
    STAGGER_RETURN_IF_ERROR(meta->PutChunk(job, id, *m));
    ++report->chunks;
  }
  return absl::OkStatus();
}

// Commits again every manifest of `job`'s log, counting the complete steps
// and the chunks they name that this server does not hold.
Status ReplayManifests(const std::string& job, const std::string& log_path,
                       MetaStore* meta, RebuildReport* report) {
  STAGGER_ASSIGN_OR_RETURN(ManifestLog::Contents log,
                           ManifestLog::Read(log_path));
  if (log.ignored_bytes > 0) {
    report->problems.push_back(
        absl::StrCat("job ", job, ": manifest log ends in ", log.ignored_bytes,
                     " torn or corrupt bytes, ignored"));
  }
  std::set<int64_t> complete;
  std::set<format::ChunkId> missing;
  for (const pb::ShardManifest& m : log.manifests) {
    if (m.job() != job) {
      ++report->manifests_refused;
      report->problems.push_back(absl::StrCat(
          "job ", job, ": log holds a manifest of job '", m.job(), "'"));
      continue;
    }
    auto info = meta->CommitShard(m, /*chunks_elsewhere=*/true);
    if (!info.ok()) {
      ++report->manifests_refused;
      report->problems.push_back(absl::StrCat("job ", job, " step ", m.step(),
                                              " rank ", m.rank(), ": ",
                                              info.status().message()));
      continue;
    }
    ++report->manifests;
    if (info->complete()) complete.insert(info->step());
    for (const pb::TensorEntry& t : m.tensors()) {
      for (const pb::ChunkRef& c : t.chunks()) {
        auto id = format::ChunkId::FromBytes(c.id());
        if (id.ok() && !meta->GetChunk(job, *id).ok()) missing.insert(*id);
      }
    }
  }
  report->steps_complete += complete.size();
  report->chunks_elsewhere += missing.size();
  return absl::OkStatus();
}

}  // namespace

Result<RebuildReport> RebuildIndex(const std::string& data_dir) {
  RebuildReport report;
  std::error_code ec;
  const std::string meta_dir = data_dir + "/meta";
  if (!std::filesystem::is_directory(data_dir + "/segments", ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        data_dir, " has no segments/ directory: nothing to rebuild from"));
  }
  STAGGER_RETURN_IF_ERROR(MoveMetaAside(meta_dir, &report));
  STAGGER_ASSIGN_OR_RETURN(auto meta, MetaStore::Open(meta_dir));
  SegmentStoreOptions so;
  so.dir = data_dir + "/segments";
  STAGGER_ASSIGN_OR_RETURN(auto segments, SegmentStore::Open(so));
  const std::string logs = data_dir + "/manifests";
  for (const std::string& job : JobsIn(so.dir, logs)) {
    ++report.jobs;
    STAGGER_RETURN_IF_ERROR(
        IndexRecords(job, segments.get(), meta.get(), &report));
    STAGGER_RETURN_IF_ERROR(
        ReplayManifests(job, logs + "/" + job + ".log", meta.get(), &report));
  }
  return report;
}

}  // namespace stagger::server
