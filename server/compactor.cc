#include "server/compactor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace stagger::server {
namespace {

std::string Where(const std::string& job, uint64_t segment) {
  return absl::StrCat("compaction of job '", job, "' segment ", segment);
}

// Collects the callbacks of a batch of appends. Wait() must run before the
// waiter or the relocations it fills go away: callbacks run on the segment
// writer thread.
class AppendWaiter {
 public:
  AppendCallback Add(Relocation* r) {
    absl::MutexLock l(&mu_);
    ++pending_;
    return [this, r](Result<ChunkLocation> loc) {
      absl::MutexLock l(&mu_);
      if (loc.ok()) {
        r->to = *loc;
      } else if (error_.ok()) {
        error_ = loc.status();
      }
      --pending_;
    };
  }
  Status Wait() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &pending_));
    return error_;
  }

 private:
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

Result<CompactionStats> CompactionTicket::Wait(absl::Time deadline) const {
  if (!done_.WaitForNotificationWithDeadline(deadline)) {
    return absl::DeadlineExceededError("compaction is still running");
  }
  return result_;
}

void CompactionTicket::Finish(Result<CompactionStats> result) {
  result_ = std::move(result);
  done_.Notify();
}

// The state of one pass over one job.
class Compactor::Pass {
 public:
  Pass(Compactor* owner, const std::string& job) : c_(owner), job_(job) {}

  // A whole pass (steps 1-4).
  Result<CompactionStats> Run();
  // Step 4 alone, for every sealed segment.
  Result<CompactionStats> Reclaim();

 private:
  // Removes those of `victims` (id -> file size) the index names nothing
  // in, with removals held off from the scan on.
  Status RemoveUnnamed(const std::map<uint64_t, uint64_t>& victims);
  // Whether `s` holds fewer live bytes (per `live`) than the threshold.
  bool MostlyDead(const SegmentInfo& s,
                  const absl::flat_hash_map<uint64_t, uint64_t>& live) const;
  // The segments to compact: those MostlyDead, and while the job is over
  // max_space_amp the emptiest of the rest. The open segment is a
  // candidate from min_roll_bytes on.
  std::set<uint64_t> Pick(
      const std::vector<SegmentInfo>& segments,
      const absl::flat_hash_map<uint64_t, uint64_t>& live) const;
  // Copies the records of `segment` still indexed there (sorted by offset)
  // and points the index at the copies, batch by batch.
  Status MoveRecords(uint64_t segment, std::vector<Relocation>& records);
  // Reads the records of one batch starting at records[*next] and queues
  // their copies; returns the first error (the queued copies still finish).
  Status CopyBatch(uint64_t segment, std::vector<Relocation>& records,
                   size_t* next, AppendWaiter* waiter,
                   std::vector<Relocation*>* copied, uint64_t* bytes);

  Compactor* const c_;
  const std::string job_;
  CompactionStats stats_;
};

bool Compactor::Pass::MostlyDead(
    const SegmentInfo& s,
    const absl::flat_hash_map<uint64_t, uint64_t>& live) const {
  auto it = live.find(s.id);
  const uint64_t bytes = it == live.end() ? 0 : it->second;
  return bytes == 0 || static_cast<double>(bytes) <
                           c_->options_.threshold * static_cast<double>(s.size);
}

std::set<uint64_t> Compactor::Pass::Pick(
    const std::vector<SegmentInfo>& segments,
    const absl::flat_hash_map<uint64_t, uint64_t>& live) const {
  struct Candidate {
    uint64_t id;
    double live_fraction;
    uint64_t dead;  // at least
  };
  std::set<uint64_t> picked;
  std::vector<Candidate> rest;
  uint64_t live_total = 0, dead_total = 0;
  for (const SegmentInfo& s : segments) {
    auto it = live.find(s.id);
    const uint64_t bytes = it == live.end() ? 0 : it->second;
    const uint64_t dead =
        s.records_at_least > bytes ? s.records_at_least - bytes : 0;
    live_total += bytes;
    dead_total += dead;
    // An open segment only from min_roll_bytes on, so that a small job
    // keeps one segment instead of making a new one at every pass; but one
    // with nothing live costs no copy to reclaim.
    if (!s.sealed && s.size < c_->options_.min_roll_bytes && bytes > 0) {
      continue;
    }
    if (MostlyDead(s, live)) {
      picked.insert(s.id);
      dead_total -= dead;
    } else if (dead > 0) {
      rest.push_back(
          {s.id, s.size == 0 ? 1.0 : double(bytes) / double(s.size), dead});
    }
  }
  const double amp = c_->options_.max_space_amp;
  if (amp < 1 || live_total == 0 ||
      double(live_total + dead_total) <= amp * double(live_total)) {
    return picked;
  }
  // Over the bound: the emptiest first, down to half of the dead bytes the
  // bound allows, so that the next few saves do not call for another pass.
  const double allowed = (amp - 1) / 2 * double(live_total);
  std::sort(rest.begin(), rest.end(),
            [](const Candidate& a, const Candidate& b) {
              return a.live_fraction < b.live_fraction;
            });
  for (const Candidate& c : rest) {
    if (double(dead_total) <= allowed || c.live_fraction > kMaxLiveFraction) {
      break;
    }
    picked.insert(c.id);
    dead_total -= c.dead;
  }
  return picked;
}

Result<CompactionStats> Compactor::Pass::Run() {
  STAGGER_ASSIGN_OR_RETURN(std::vector<SegmentInfo> segments,
                           c_->segments_->ListSegments(job_));
  if (segments.empty()) return stats_;
  // The short-lived segments hold what was saved and rebased since the
  // last pass (passes follow a step's commit and its rebases): retired,
  // they hold no later save's records, so they die whole when the next
  // save replaces theirs.
  bool rolled = false;
  for (const SegmentInfo& s : segments) {
    if (s.sealed || s.lifetime == RecordLifetime::kLong ||
        s.size < c_->options_.min_roll_bytes) {
      continue;
    }
    STAGGER_RETURN_IF_ERROR_CTX(c_->segments_->Roll(job_, s.lifetime),
                                Where(job_, s.id));
    ++stats_.segments_rolled;
    rolled = true;
  }
  if (rolled) {
    STAGGER_ASSIGN_OR_RETURN(segments, c_->segments_->ListSegments(job_));
  }
  absl::flat_hash_map<uint64_t, uint64_t> live;
  STAGGER_RETURN_IF_ERROR(c_->meta_->ForEachChunk(
      job_, [&](const format::ChunkId&, const ChunkMeta& m) {
        live[m.location.segment] += m.location.record_size;
      }));
  const std::set<uint64_t> picked = Pick(segments, live);
  // The segment being appended to holds the newest steps; once it is
  // picked it is rolled over so that it can be compacted now, not when it
  // fills up. (Records appended after the scan go to the new one.)
  for (const SegmentInfo& s : segments) {
    if (!s.sealed && picked.count(s.id) != 0) {
      STAGGER_RETURN_IF_ERROR_CTX(c_->segments_->Roll(job_, s.lifetime),
                                  Where(job_, s.id));
      ++stats_.segments_rolled;
    }
  }
  STAGGER_ASSIGN_OR_RETURN(std::vector<SegmentInfo> sealed,
                           c_->segments_->ListSealedSegments(job_));
  std::map<uint64_t, uint64_t> victims;  // segment id -> file size
  for (const SegmentInfo& s : sealed) {
    if (picked.count(s.id) != 0) victims.emplace(s.id, s.size);
  }
  if (victims.empty()) return stats_;

  std::map<uint64_t, std::vector<Relocation>> records;
  STAGGER_RETURN_IF_ERROR(c_->meta_->ForEachChunk(
      job_, [&](const format::ChunkId& id, const ChunkMeta& m) {
        if (victims.count(m.location.segment) != 0) {
          records[m.location.segment].push_back(
              Relocation{id, m.location, ChunkLocation{}});
        }
      }));
  for (auto& [segment, list] : records) {
    std::sort(list.begin(), list.end(),
              [](const Relocation& a, const Relocation& b) {
                return a.from.offset < b.from.offset;
              });
    STAGGER_RETURN_IF_ERROR(MoveRecords(segment, list));
  }

  STAGGER_RETURN_IF_ERROR(RemoveUnnamed(victims));
  return stats_;
}

Result<CompactionStats> Compactor::Pass::Reclaim() {
  STAGGER_ASSIGN_OR_RETURN(std::vector<SegmentInfo> sealed,
                           c_->segments_->ListSealedSegments(job_));
  std::map<uint64_t, uint64_t> victims;
  for (const SegmentInfo& s : sealed) victims.emplace(s.id, s.size);
  if (victims.empty()) return stats_;
  STAGGER_RETURN_IF_ERROR(RemoveUnnamed(victims));
  return stats_;
}

Status Compactor::Pass::RemoveUnnamed(
    const std::map<uint64_t, uint64_t>& victims) {
  // Remove only what the index no longer names: the scan sees every
  // relocation (each was a synced write before it), and no held writer is
  // between appending a record and indexing it.
  absl::WriterMutexLock hold(&c_->removal_mu_);
  std::set<uint64_t> named;
  STAGGER_RETURN_IF_ERROR(c_->meta_->ForEachChunk(
      job_, [&](const format::ChunkId&, const ChunkMeta& m) {
        if (victims.count(m.location.segment) != 0) {
          named.insert(m.location.segment);
        }
      }));
  for (const auto& [segment, size] : victims) {
    if (named.count(segment) != 0) continue;  // a later pass retries
    if (c_->options_.on_step) {
      STAGGER_RETURN_IF_ERROR(
          c_->options_.on_step(CompactionStep::kIndexed, segment));
    }
    Status s = c_->segments_->RemoveSegment(job_, segment);
    if (!s.ok()) return WithContext(s, Where(job_, segment));
    ++stats_.segments_removed;
    stats_.bytes_reclaimed += size;
  }
  return absl::OkStatus();
}

Status Compactor::Pass::MoveRecords(uint64_t segment,
                                    std::vector<Relocation>& records) {
  size_t next = 0;
  while (next < records.size()) {
    AppendWaiter waiter;
    std::vector<Relocation*> copied;
    uint64_t bytes = 0;
    Status read = CopyBatch(segment, records, &next, &waiter, &copied, &bytes);
    // Always wait: the callbacks write into `records`.
    Status written = waiter.Wait();
    STAGGER_RETURN_IF_ERROR(read);
    if (!written.ok()) {
      return WithContext(
          written, absl::StrCat(Where(job_, segment), ": writing the copies"));
    }
    if (copied.empty()) continue;
    if (c_->options_.on_step) {
      STAGGER_RETURN_IF_ERROR(
          c_->options_.on_step(CompactionStep::kCopied, segment));
    }
    std::vector<Relocation> moves;
    moves.reserve(copied.size());
    for (const Relocation* r : copied) moves.push_back(*r);
    auto moved = c_->meta_->RelocateChunks(job_, moves);
    if (!moved.ok()) return WithContext(moved.status(), Where(job_, segment));
    stats_.records_copied += copied.size();
    stats_.bytes_copied += bytes;
  }
  return absl::OkStatus();
}

Status Compactor::Pass::CopyBatch(uint64_t segment,
                                  std::vector<Relocation>& records,
                                  size_t* next, AppendWaiter* waiter,
                                  std::vector<Relocation*>* copied,
                                  uint64_t* bytes) {
  for (; *next < records.size(); ++*next) {
    Relocation& r = records[*next];
    if (!copied->empty() &&
        *bytes + r.from.record_size > c_->options_.batch_bytes) {
      break;
    }
    // Not worth copying what was collected or moved since the scan.
    auto now = c_->meta_->GetChunk(job_, r.id);
    if (absl::IsNotFound(now.status())) continue;
    if (!now.ok()) return WithContext(now.status(), Where(job_, segment));
    if (!(now->location == r.from)) continue;

    if (!c_->limiter_.Request(r.from.record_size, qos::Priority::kBackground)
             .ok()) {
      return absl::CancelledError(
          absl::StrCat(Where(job_, segment), ": stopped (shutting down)"));
    }
    auto rec = c_->segments_->Read(job_, r.from, IOOptions{IOPriority::kLow});
    if (!rec.ok()) {
      // A corrupt record is not copied; its segment stays for inspection.
      return WithContext(rec.status(), Where(job_, segment));
    }
    if (rec->header.chunk_id != r.id) {
      return absl::DataLossError(
          absl::StrCat(Where(job_, segment), ": index places chunk ",
                       r.id.ToHex(), " at offset ", r.from.offset,
                       ", which holds chunk ", rec->header.chunk_id.ToHex()));
    }
    *bytes += r.from.record_size;
    copied->push_back(&r);
    c_->segments_->Append(job_, rec->header, std::move(rec->payload),
                          waiter->Add(&r));
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<Compactor>> Compactor::Create(SegmentStore* segments,
                                                     MetaStore* meta,
                                                     CompactorOptions options) {
  if (!(options.threshold > 0 && options.threshold <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compaction threshold must be in (0, 1], got ", options.threshold));
  }
  if (!(options.max_space_amp == 0 || options.max_space_amp >= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compaction space amplification bound must be 0 (none) or at least "
        "1, got ",
        options.max_space_amp));
  }
  if (options.batch_bytes == 0) {
    return absl::InvalidArgumentError("compaction batch size must be > 0");
  }
  return std::unique_ptr<Compactor>(
      new Compactor(segments, meta, std::move(options)));
}

Compactor::Compactor(SegmentStore* segments, MetaStore* meta,
                     CompactorOptions options)
    : segments_(segments),
      meta_(meta),
      options_(std::move(options)),
      limiter_({.bytes_per_s = static_cast<double>(options_.bytes_per_s)}) {
  thread_ = std::thread([this] { Run(); });
}

Compactor::~Compactor() { Stop(); }

void Compactor::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  limiter_.Cancel();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const CompactionTicket> Compactor::Schedule(
    const std::string& job) {
  return Queue(job, /*reclaim_only=*/false);
}

std::shared_ptr<const CompactionTicket> Compactor::ScheduleReclaim(
    const std::string& job) {
  return Queue(job, /*reclaim_only=*/true);
}

std::shared_ptr<const CompactionTicket> Compactor::Queue(const std::string& job,
                                                         bool reclaim_only) {
  absl::MutexLock l(&mu_);
  if (stopping_) {
    auto t = std::make_shared<CompactionTicket>();
    t->Finish(absl::UnavailableError("compactor stopped"));
    return t;
  }
  for (Queued& q : queue_) {
    if (q.job != job) continue;
    q.reclaim_only = q.reclaim_only && reclaim_only;
    return q.ticket;
  }
  queue_.push_back({job, std::make_shared<CompactionTicket>(), reclaim_only});
  return queue_.back().ticket;
}

Result<CompactionStats> Compactor::CompactJob(const std::string& job,
                                              bool reclaim_only) {
  absl::MutexLock pass(&pass_mu_);
  Pass p(this, job);
  return reclaim_only ? p.Reclaim() : p.Run();
}

void Compactor::Run() {
  while (true) {
    Queued q;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(this, &Compactor::HasWorkOrStopping));
      if (stopping_) break;
      q = std::move(queue_.front());
      queue_.pop_front();
    }
    const std::string& job = q.job;
    auto& ticket = q.ticket;
    Result<CompactionStats> r = CompactJob(job, q.reclaim_only);
    if (absl::IsCancelled(r.status())) {
      // A shutdown stopped it between records: not a fault, so not an
      // error line (the demo ended with one on every run).
      log::Info("stagger-server", absl::StrCat("compaction of job '", job,
                                               "' stopped for the shutdown: ",
                                               r.status().message()));
    } else if (!r.ok()) {
      log::Error("stagger-server", absl::StrCat("compaction of job '", job,
                                                "': ", r.status().ToString()));
    } else if (r->segments_removed > 0 && !q.reclaim_only) {
      log::Info(
          "stagger-server",
          absl::StrCat("compacted job '", job, "': removed ",
                       r->segments_removed, " segments, copied ",
                       r->records_copied, " records (", r->bytes_copied,
                       " bytes), reclaimed ", r->bytes_reclaimed, " bytes"));
    }
    ticket->Finish(std::move(r));
  }
  absl::MutexLock l(&mu_);
  for (Queued& q : queue_) {
    q.ticket->Finish(absl::UnavailableError("compactor stopped"));
  }
  queue_.clear();
}

}  // namespace stagger::server
