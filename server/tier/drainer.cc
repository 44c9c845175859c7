#include "server/tier/drainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "format/record.h"
#include "server/chunk_read.h"
#include "server/rebaser.h"
#include "server/tier/cold_gc.h"
#include "server/tier/layout.h"
#include "util/log.h"

namespace stagger::server::tier {
namespace {

int64_t UnixMs() { return absl::ToUnixMillis(absl::Now()); }

// The base a delta record names (payload: width byte, then the base id).
Result<format::ChunkId> BaseOf(const StoredRecord& rec) {
  const std::string_view p = rec.payload.view();
  if (p.size() < 17) {
    return absl::DataLossError(absl::StrCat(
        "delta chunk ", rec.header.chunk_id.ToHex(), ": payload too short"));
  }
  return format::ChunkId::FromBytes(p.substr(1, 16));
}

// Runs fn(i) for i in [0, n) on `threads` threads; the first error.
Status ParallelFor(size_t n, int threads,
                   const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  Status first;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      Status s = fn(i);
      if (!s.ok()) {
        absl::MutexLock lock(&mu);
        if (first.ok()) first = s;
        next.store(n);  // the others stop after their current chunk
      }
    }
  };
  if (n == 0) return absl::OkStatus();
  std::vector<std::thread> pool;
  const size_t extra = std::min<size_t>(n, std::max(threads, 1)) - 1;
  for (size_t t = 0; t < extra; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return first;
}

}  // namespace

Drainer::Drainer(MetaStore* meta, SegmentStore* segments, ObjectStore* store,
                 DrainerOptions options)
    : meta_(meta),
      segments_(segments),
      store_(store),
      options_(std::move(options)),
      started_unix_ms_(UnixMs()),
      limiter_({.bytes_per_s = static_cast<double>(options_.bytes_per_s),
                .clients_busy = options_.busy}) {}

Drainer::~Drainer() { Stop(); }

void Drainer::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Loop(); });
}

void Drainer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  limiter_.Cancel();
  if (thread_.joinable()) thread_.join();
}

void Drainer::Notify() {
  absl::MutexLock lock(&mu_);
  notified_ = true;
}

Result<ImportStats> Drainer::Import() {
  absl::MutexLock lock(&import_mu_);
  last_import_unix_ms_ = UnixMs();
  ImportOptions o;
  o.guard = &deletion_mu_;
  o.refused = &refused_;
  Result<ImportStats> r = ImportColdSteps(meta_, store_, o);
  if (r.ok()) {
    absl::MutexLock stats_lock(&mu_);
    stats_.cold_steps_imported += r->steps;
  }
  return r;
}

Drainer::DeletionScope::DeletionScope(Drainer* drainer) : drainer_(drainer) {
  if (drainer_ != nullptr) drainer_->deletion_mu_.ReaderLock();
}

Drainer::DeletionScope::~DeletionScope() {
  if (drainer_ != nullptr) drainer_->deletion_mu_.ReaderUnlock();
}

void Drainer::ImportIfDue() {
  {
    absl::MutexLock lock(&import_mu_);
    if (options_.import_ms <= 0 ||
        UnixMs() - last_import_unix_ms_ < options_.import_ms) {
      return;
    }
  }
  Result<ImportStats> r = Import();
  if (!r.ok()) return;  // the store is down: the drain says so
  if (r->steps > 0) {
    log::Info("stagger-server",
              absl::StrCat("imported ", r->steps, " step(s) of ", r->jobs,
                           " job(s) that other servers stored in ",
                           store_->Describe()));
  }
}

void Drainer::Loop() {
  int64_t backoff_ms = options_.min_backoff_ms;
  for (;;) {
    const Status s = DrainOnce();
    if (s.ok() || absl::IsFailedPrecondition(s)) ImportIfDue();
    const bool failed =
        !s.ok() && !absl::IsFailedPrecondition(s) && !absl::IsCancelled(s);
    int64_t wait_ms = options_.poll_ms;
    if (failed) {
      wait_ms = backoff_ms;
      backoff_ms = std::min(backoff_ms * 2, options_.max_backoff_ms);
    } else {
      backoff_ms = options_.min_backoff_ms;
    }
    absl::MutexLock lock(&mu_);
    auto wake = [this, failed]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      // A notification does not cut a backoff short: the store is down.
      return stopping_ || (notified_ && !failed);
    };
    mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Milliseconds(wait_ms));
    if (stopping_) return;
    notified_ = false;
  }
}

Status Drainer::DrainOnce() {
  Pass pass;
  Result<std::vector<std::string>> jobs = meta_->ListJobs();
  pass.Note(jobs.status());
  for (const std::string& job :
       jobs.ok() ? *jobs : std::vector<std::string>{}) {
    DrainJob(job, &pass);
  }
  EndPass(pass);
  return pass.first;
}

void Drainer::DrainJob(const std::string& job, Pass* pass) {
  if (pass->first.ok()) pass->Note(ForgetStepsGoneFromStore(job));
  Result<std::vector<pb::StepInfo>> steps = meta_->ListSteps(job, true);
  pass->Note(steps.status());
  if (steps.ok() && steps->empty()) {
    // Chunks of a job coordinated elsewhere: the coordinator's steps wait
    // for them in the store.
    if (pass->first.ok()) pass->Note(DrainChunksOf(job));
    return;
  }
  Result<std::set<int64_t>> drained = meta_->DrainedSteps(job);
  pass->Note(drained.status());
  if (!steps.ok() || !drained.ok()) return;
  bool drained_any = false;
  for (const pb::StepInfo& info : *steps) {
    // A memory-level step waits until it is on disk (its chunks are read
    // from there).
    if (!info.complete() || !info.memory_ranks().empty() ||
        drained->count(info.step()) != 0) {
      continue;
    }
    // Once the store failed, the rest only count as behind.
    Status s = pass->first.ok() || absl::IsFailedPrecondition(pass->first)
                   ? DrainStep(job, info)
                   : absl::CancelledError("not tried in this pass");
    if (s.ok()) s = meta_->MarkDrained(job, info.step());
    if (s.ok()) {
      absl::MutexLock lock(&mu_);
      ++stats_.steps_drained;
      drained_any = true;
      continue;
    }
    ++pass->behind;
    if (pass->oldest == 0 || info.completed_unix_ms() < pass->oldest) {
      pass->oldest = info.completed_unix_ms();
    }
    if (!absl::IsCancelled(s)) pass->Note(s);
  }
  if (drained_any && options_.keep > 0) pass->Note(CollectCold(job));
}

void Drainer::EndPass(const Pass& pass) {
  absl::MutexLock lock(&mu_);
  stats_.steps_behind = pass.behind;
  stats_.oldest_behind_unix_ms = pass.oldest;
  const Status& first = pass.first;
  if (!first.ok()) {
    const bool news = stats_.last_error != first.ToString();
    stats_.last_error = first.ToString();
    stats_.last_error_unix_ms = UnixMs();
    if (!absl::IsFailedPrecondition(first)) ++stats_.failed_passes;
    if (news) {
      // A step waiting for another server's chunks is not a fault.
      const std::string line =
          absl::StrCat("drain to ", store_->Describe(), ": ", pass.behind,
                       " step(s) behind: ", first.ToString());
      if (absl::IsFailedPrecondition(first)) {
        log::Info("stagger-server", line);
      } else {
        log::Warning("stagger-server", line);
      }
    }
  } else {
    if (!stats_.last_error.empty()) {
      log::Info("stagger-server",
                absl::StrCat("drain to ", store_->Describe(), ": caught up"));
    }
    stats_.last_error.clear();
  }
  caught_up_ = pass.behind == 0 && first.ok();
  ++passes_;
}

Status Drainer::ForgetStepsGoneFromStore(const std::string& job) {
  STAGGER_ASSIGN_OR_RETURN(std::set<int64_t> cold_only,
                           meta_->ColdOnlySteps(job));
  // Retention deletes the oldest steps first: from the oldest on, until
  // one is still there (one stat per job and pass once caught up).
  std::vector<int64_t> gone;
  for (int64_t step : cold_only) {
    STAGGER_ASSIGN_OR_RETURN(std::optional<ObjectInfo> info,
                             store_->Stat(StepObject(job, step)));
    if (info.has_value()) break;
    gone.push_back(step);
  }
  if (gone.empty()) return absl::OkStatus();
  STAGGER_RETURN_IF_ERROR_CTX(
      meta_->DeleteSteps(job, gone, false, options_.grace_s * 1000).status(),
      "job '", job, "': forgetting the steps gone from ", store_->Describe());
  log::Info("stagger-server",
            absl::StrCat("job '", job, "': ", gone.size(),
                         " step(s) held only in ", store_->Describe(),
                         " were deleted there (retention); no longer listed"));
  absl::MutexLock lock(&mu_);
  stats_.cold_steps_forgotten += gone.size();
  return absl::OkStatus();
}

Status Drainer::CollectCold(const std::string& job) {
  STAGGER_ASSIGN_OR_RETURN(
      ColdGcResult r,
      GcColdJob(store_, job, options_.keep, options_.grace_s, UnixMs() / 1000));
  if (!r.steps_deleted.empty() || r.chunks_deleted > 0) {
    log::Info(
        "stagger-server",
        absl::StrCat(store_->Describe(), ": job '", job, "': kept the ",
                     options_.keep, " newest step(s), deleted ",
                     r.steps_deleted.size(), " step(s) and ", r.chunks_deleted,
                     " chunk(s), ", r.bytes_freed, " bytes"));
  }
  absl::MutexLock lock(&mu_);
  stats_.gc_steps_deleted += r.steps_deleted.size();
  stats_.gc_chunks_deleted += r.chunks_deleted;
  stats_.gc_bytes_freed += r.bytes_freed;
  return absl::OkStatus();
}

Status Drainer::DrainChunks(const std::string& job,
                            const std::vector<format::ChunkId>& chunks,
                            bool skip_missing) {
  return ParallelFor(chunks.size(), options_.parallel, [&](size_t i) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("drain stopping");
    }
    std::vector<format::ChunkId> chain;
    Status s = DrainChunk(job, chunks[i], &chain);
    return skip_missing && absl::IsFailedPrecondition(s) ? absl::OkStatus() : s;
  });
}

Status Drainer::DrainChunksOf(const std::string& job) {
  std::vector<format::ChunkId> chunks;
  STAGGER_RETURN_IF_ERROR(meta_->ForEachChunk(
      job, [&](const format::ChunkId& id, const ChunkMeta&) {
        if (!Known(job, id)) chunks.push_back(id);
      }));
  // A chunk gone since it was listed (a gc or a sweep): nothing to drain.
  return DrainChunks(job, chunks, /*skip_missing=*/true);
}

Status Drainer::DrainStep(const std::string& job, const pb::StepInfo& info) {
  std::vector<pb::ShardManifest> shards;
  std::vector<format::ChunkId> chunks;
  absl::flat_hash_set<format::ChunkId> seen;
  for (uint32_t rank : info.committed_ranks()) {
    STAGGER_ASSIGN_OR_RETURN(pb::ShardManifest m,
                             meta_->GetShard(job, info.step(), rank));
    for (const pb::TensorEntry& t : m.tensors()) {
      for (const pb::ChunkRef& c : t.chunks()) {
        STAGGER_ASSIGN_OR_RETURN(format::ChunkId id,
                                 format::ChunkId::FromBytes(c.id()));
        if (seen.insert(id).second && !Known(job, id)) chunks.push_back(id);
      }
    }
    shards.push_back(std::move(m));
  }
  STAGGER_RETURN_IF_ERROR(DrainChunks(job, chunks, /*skip_missing=*/false));
  for (const pb::ShardManifest& m : shards) {
    STAGGER_RETURN_IF_ERROR(
        Put(ManifestObject(job, info.step(), m.rank()), m.SerializeAsString()));
  }
  return Put(StepObject(job, info.step()), info.SerializeAsString());
}

Status Drainer::RequireInStore(const std::string& job,
                               const format::ChunkId& id) {
  // Not here: another server's, or only in the store (an imported step).
  STAGGER_ASSIGN_OR_RETURN(std::optional<uint64_t> size,
                           store_->Size(ChunkObject(job, id)));
  if (size) {
    SetKnown(job, id);
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "chunk ", id.ToHex(), " of job ", job,
      " is not on this server and not in ", store_->Describe(), " yet"));
}

Status Drainer::DrainChunk(const std::string& job, const format::ChunkId& id,
                           std::vector<format::ChunkId>* chain) {
  if (Known(job, id)) return absl::OkStatus();
  const ObjectName object = ChunkObject(job, id);
  Result<ChunkMeta> meta = meta_->GetChunk(job, id);
  if (absl::IsNotFound(meta.status())) return RequireInStore(job, id);
  STAGGER_RETURN_IF_ERROR(meta.status());
  // A chunk written before this drain started may be in the store from an
  // earlier run: a stat, not its bytes. A newer one is written as a new
  // object (PutNew: nothing is rewritten if it is there after all).
  if (meta->written_unix_ms < started_unix_ms_) {
    STAGGER_ASSIGN_OR_RETURN(std::optional<uint64_t> size,
                             store_->Size(object));
    if (size) {
      SetKnown(job, id);
      absl::MutexLock lock(&mu_);
      ++stats_.chunks_present;
      return absl::OkStatus();
    }
  }
  // The record as stored now (a rebase may have rewritten it since the
  // index entry was read): its base, if any, goes first.
  STAGGER_ASSIGN_OR_RETURN(StoredRecord rec,
                           ReadChunk(meta_, segments_, job, id, *meta));
  bool raw = false;
  if (format::IsDelta(rec.header.codec)) {
    STAGGER_ASSIGN_OR_RETURN(format::ChunkId base, BaseOf(rec));
    if (base == id ||
        std::find(chain->begin(), chain->end(), base) != chain->end()) {
      raw = true;  // its base leads back to it: store it decoded
    } else {
      chain->push_back(id);
      Status s = DrainChunk(job, base, chain);
      chain->pop_back();
      STAGGER_RETURN_IF_ERROR(s);
    }
  }
  std::string bytes;
  if (raw) {
    STAGGER_ASSIGN_OR_RETURN(bytes, DecodedRecord(job, id, *meta));
    absl::MutexLock lock(&mu_);
    ++stats_.raw_fallbacks;
  } else {
    bytes.resize(format::kRecordHeaderSize);
    format::EncodeRecordHeader(rec.header, bytes.data());
    bytes += rec.payload.view();
  }
  STAGGER_ASSIGN_OR_RETURN(bool written, PutNew(object, bytes));
  SetKnown(job, id);
  absl::MutexLock lock(&mu_);
  ++(written ? stats_.chunks_written : stats_.chunks_present);
  return absl::OkStatus();
}

Result<std::string> Drainer::DecodedRecord(const std::string& job,
                                           const format::ChunkId& id,
                                           const ChunkMeta& meta) {
  std::string data(meta.raw_length, '\0');
  format::Codec whole = format::Codec::kRaw;
  STAGGER_RETURN_IF_ERROR(
      DecodeStoredChunk(meta_, segments_, job, id, meta, data.data(), &whole));
  format::RecordHeader h;
  h.codec = format::Codec::kRaw;
  h.chunk_id = id;
  h.raw_length = data.size();
  std::string record(format::RecordSize(data.size()), '\0');
  format::EncodeRecord(h, data, record.data());
  record.resize(format::kRecordHeaderSize + data.size());
  return record;
}

Status Drainer::Put(const ObjectName& o, std::string_view bytes) {
  Pace(bytes.size());
  STAGGER_RETURN_IF_ERROR(store_->Put(o, bytes));
  absl::MutexLock lock(&mu_);
  stats_.bytes_written += bytes.size();
  return absl::OkStatus();
}

Result<bool> Drainer::PutNew(const ObjectName& o, std::string_view bytes) {
  Pace(bytes.size());
  STAGGER_ASSIGN_OR_RETURN(bool written, store_->PutNew(o, bytes));
  absl::MutexLock lock(&mu_);
  if (written) stats_.bytes_written += bytes.size();
  return written;
}

void Drainer::Pace(size_t bytes) {
  // CANCELLED once stopping: the chunk in hand still goes, at once.
  limiter_.Request(bytes, qos::Priority::kBackground).IgnoreError();
}

bool Drainer::Known(const std::string& job, const format::ChunkId& id) {
  absl::MutexLock lock(&mu_);
  return known_.contains(ChunkKey{job, id});
}

void Drainer::SetKnown(const std::string& job, const format::ChunkId& id) {
  absl::MutexLock lock(&mu_);
  known_.insert(ChunkKey{job, id});
}

bool Drainer::WaitDrained(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const uint64_t target = passes_ + 2;
  notified_ = true;
  auto done = [this, target]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return passes_ >= target && caught_up_;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

DrainerStats Drainer::stats() const {
  DrainerStats s;
  {
    absl::MutexLock lock(&mu_);
    s = stats_;
  }
  s.busy_wait_s = static_cast<double>(limiter_.yielded_ns()) * 1e-9;
  return s;
}

}  // namespace stagger::server::tier
