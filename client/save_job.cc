#include "client/save_job.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "absl/strings/str_cat.h"
#include "client/control.h"
#include "util/log.h"

namespace stagger::client {
namespace {

double Since(SaveJob::Clock::time_point t) {
  return std::chrono::duration<double>(SaveJob::Clock::now() - t).count();
}

}  // namespace

SaveJob::SaveJob(SaveJobDeps deps, pb::ShardManifest manifest,
                 std::vector<SaveChunk> chunks, Clock::time_point start)
    : deps_(deps),
      manifest_(std::move(manifest)),
      chunks_(std::move(chunks)),
      start_(start),
      state_(std::make_shared<SaveHandle::State>(manifest_.step())),
      shaping_start_(deps.shaping->Now()),
      outcomes_(chunks_.size()),
      uncaptured_(chunks_.size()),
      unfinished_(chunks_.size()) {
  snapshot_done_ = chunks_.empty();
  draining_ = deps_.ship_while_snapshotting;
}

bool SaveJob::ServersUp(const SaveChunk& c) const {
  for (size_t i = 0; i < deps_.replicas && i < c.servers.size(); ++i) {
    if (c.servers[i]->down) return false;
  }
  return true;
}

bool SaveJob::HomeUp(const SaveChunk& c) const {
  return c.previous_at_home && ServersUp(c);
}

void SaveJob::FingerprintInPlace(std::vector<bool>* unchanged) {
  std::map<SnapshotSource*, std::vector<size_t>> by_source;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (chunks_[i].fingerprint_in_place)
      by_source[chunks_[i].source].push_back(i);
  }
  for (auto& [source, idx] : by_source) {
    std::vector<std::pair<const char*, size_t>> spans;
    for (size_t i : idx) spans.emplace_back(chunks_[i].src, chunks_[i].len);
    std::vector<uint64_t> fp;
    // Without fingerprints every chunk is simply copied and hashed on host:
    // slower, still correct, so it is said once and the save goes on.
    Status s = source->Fingerprint(spans, &fp);
    if (s.ok() && fp.size() != 2 * idx.size()) {
      s = absl::InternalError(absl::StrCat(fp.size(), " fingerprint words for ",
                                           idx.size(), " chunks"));
    }
    if (!s.ok()) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        log::Warning("stagger",
                     absl::StrCat("in-place fingerprints failed (", s.message(),
                                  "); unchanged chunks are found by copying "
                                  "and hashing on the host instead"));
      }
      continue;
    }
    for (size_t k = 0; k < idx.size(); ++k) {
      const size_t i = idx[k];
      std::array<uint64_t, 2> f = {fp[2 * k], fp[2 * k + 1]};
      outcomes_[i].fingerprint = f;
      (*unchanged)[i] = chunks_[i].previous.has_value() &&
                        chunks_[i].previous_fingerprint == f &&
                        HomeUp(chunks_[i]);
    }
  }
}

void SaveJob::Run() {
  const uint64_t snapshotted = Snapshot();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](size_t* n) { return *n == 0; }, &unfinished_));
  }
  Status s;
  {
    absl::MutexLock lock(&mu_);
    s = first_error_;
  }
  const ShapingStats qos = deps_.shaping->Since(shaping_start_);
  SaveStats stats = CollectStats(snapshotted, qos);
  if (s.ok()) {
    {
      // Save() returns right after the snapshot; its stall goes in below.
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&caller_returned_));
    }
    RecordShardStats(stats);
    s = CommitShard(*deps_.servers, deps_.replicas, manifest_).status();
  }
  stats.durable_s = Since(start_);
  if (qos.deadline_s > 0 && stats.durable_s > qos.deadline_s) {
    stats.late_s = stats.durable_s - qos.deadline_s;
    if (s.ok()) LogLate(stats, qos.deadline_s);
  }
  status_ = s;
  if (deps_.on_finished) deps_.on_finished(s, stats);
  state_->Finish(WithContext(s, absl::StrCat("save of job '", manifest_.job(),
                                             "' step ", manifest_.step(),
                                             " rank ", manifest_.rank())),
                 stats);
}

void SaveJob::LogLate(const SaveStats& st, double deadline_s) const {
  // One line per late save: what held it back, so that an operator can
  // tell a deadline below the link's free share from encoders short of CPU.
  uint64_t encoded = 0;
  for (const auto& [codec, n] : st.codec_chunks) {
    if (codec != "raw") encoded += n;
  }
  log::Warning(
      "stagger",
      absl::StrCat("save of job '", manifest_.job(), "' step ",
                   manifest_.step(), " rank ", manifest_.rank(),
                   " was durable after ", absl::SixDigits(st.durable_s), " s, ",
                   absl::SixDigits(st.late_s), " s past its deadline of ",
                   absl::SixDigits(deadline_s),
                   " s: it kept to the training job's idle windows (held back "
                   "for collectives ",
                   absl::SixDigits(st.yield_s), " s, encoders paused ",
                   absl::SixDigits(st.cpu_yield_s), " s; ", st.bytes_shipped,
                   " of ", st.bytes_raw, " bytes shipped, ", encoded,
                   " chunks encoded) rather than crowd it; a later deadline "
                   "or a smaller state per rank meets it"));
}

uint64_t SaveJob::Snapshot() {
  auto self = shared_from_this();
  // Fingerprints are taken before anything is copied: they must describe
  // exactly the snapshot (the caller may modify its tensors as soon as the
  // copies are captured). Unchanged chunks are then not copied at all.
  std::vector<bool> unchanged(chunks_.size(), false);
  FingerprintInPlace(&unchanged);
  size_t dispatched = 0;
  uint64_t snapshotted = 0;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    {
      absl::MutexLock lock(&mu_);
      if (!first_error_.ok()) break;
    }
    if (unchanged[i]) {
      // Same fingerprint where it lives: not copied, referenced as before.
      ReferenceUnchanged(i, *chunks_[i].previous);
      ChunkCaptured(absl::OkStatus());
      ChunkDone(absl::OkStatus());
      ++dispatched;
      continue;
    }
    bool waited = false;
    const SaveChunk& c = chunks_[i];
    char* slab = deps_.pool->TryAcquire(c.len);
    if (slab == nullptr) {
      // The pool is dry: only draining frees slabs now.
      StartDraining();
      slab = deps_.pool->Acquire(c.len, &waited);
      waited = true;
    }
    {
      absl::MutexLock lock(&mu_);
      staging_limited_ |= waited;
      held_ += deps_.pool->SizeOf(slab);
      peak_held_ = std::max(peak_held_, held_);
    }
    snapshotted += c.len;
    c.source->Copy(
        slab, c.src, c.len, [self](const Status& s) { self->ChunkCaptured(s); },
        [self, i, slab](const Status& s) { self->ChunkInStaging(i, slab, s); });
    ++dispatched;
  }
  bool done_now = false;
  {
    absl::MutexLock lock(&mu_);
    // Chunks never dispatched (after a failure) will not be captured.
    size_t left = chunks_.size() - dispatched;
    uncaptured_ -= left;
    unfinished_ -= left;
    if (uncaptured_ == 0 && !snapshot_done_) {
      snapshot_done_ = true;
      snapshot_s_ = Since(start_);
      done_now = true;
    }
  }
  if (done_now) StartDraining();
  return snapshotted;
}

SaveStats SaveJob::CollectStats(uint64_t snapshotted, const ShapingStats& qos) {
  SaveStats stats;
  stats.bytes_raw = put_stats_.bytes_raw;
  stats.bytes_shipped = put_stats_.bytes_shipped;
  stats.chunks = put_stats_.chunks;
  stats.chunks_unchanged = put_stats_.chunks_unchanged;
  stats.bytes_snapshotted = snapshotted;
  stats.chunks_delta =
      put_stats_
          .codec_chunks[static_cast<int>(format::Codec::kXorByteGroupZstd)] +
      put_stats_.codec_chunks[static_cast<int>(
          format::Codec::kNumDeltaByteGroupZstd)];
  for (int c = 0; c < format::kCodecCount; ++c) {
    uint64_t n = put_stats_.codec_chunks[c];
    if (n)
      stats.codec_chunks[std::string(
          format::CodecName(static_cast<format::Codec>(c)))] = n;
  }
  for (int r = 0; r < kCodecReasons; ++r) {
    if (uint64_t n = put_stats_.codec_reasons[r]) {
      stats.codec_reasons[CodecReasonName(static_cast<CodecReason>(r))] = n;
    }
  }
  stats.chunks_no_base = put_stats_.chunks_no_base;
  stats.yield_s = qos.yield_s;
  stats.paced_rate_Bps = qos.paced_rate_Bps;
  stats.windows = qos.windows;
  stats.cpu_yield_s = qos.cpu_yield_s;
  absl::MutexLock lock(&mu_);
  stats.snapshot_s = snapshot_s_;
  stats.staging_limited = staging_limited_;
  stats.bytes_overlapped = overlapped_;
  stats.peak_chunks_shipping = peak_shipping_;
  stats.staging_bytes = peak_held_;
  stats.staging_pool_bytes = deps_.pool->size();
  return stats;
}

void SaveJob::RecordShardStats(const SaveStats& stats) {
  pb::ShardStats* ss = manifest_.mutable_stats();
  ss->set_bytes_raw(stats.bytes_raw);
  ss->set_bytes_shipped(stats.bytes_shipped);
  ss->set_chunks(stats.chunks);
  ss->set_durable_s(Since(start_));
  ss->set_stall_s(state_->stats().stall_s);
  ss->set_snapshot_s(stats.snapshot_s);
  ss->set_chunks_unchanged(stats.chunks_unchanged);
  ss->set_yield_s(stats.yield_s);
  ss->set_paced_bytes_per_s(stats.paced_rate_Bps);
  for (const auto& [codec, n] : stats.codec_chunks) {
    (*ss->mutable_codec_chunks())[codec] = n;
  }
  for (const auto& [reason, n] : stats.codec_reasons) {
    (*ss->mutable_codec_reasons())[reason] = n;
  }
  ss->set_chunks_no_base(stats.chunks_no_base);
}

void SaveJob::CallerReturned(double s) {
  state_->AddStall(s);
  absl::MutexLock lock(&mu_);
  caller_returned_ = true;
}

Status SaveJob::WaitSnapshot() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&snapshot_done_));
  return first_error_;
}

std::optional<Status> SaveJob::WaitSnapshot(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&snapshot_done_), timeout)) {
    return std::nullopt;
  }
  return first_error_;
}

void SaveJob::ChunkCaptured(const Status& s) {
  bool done = false;
  {
    absl::MutexLock lock(&mu_);
    if (!s.ok() && first_error_.ok()) first_error_ = s;
    if (--uncaptured_ == 0 && !snapshot_done_) {
      snapshot_done_ = true;
      snapshot_s_ = Since(start_);
      done = true;
    }
  }
  if (done) StartDraining();
}

void SaveJob::StartDraining() {
  std::vector<std::pair<size_t, char*>> now;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    for (auto [i, slab] : deferred_) {
      if (TakeSlotLocked(i, slab)) now.emplace_back(i, slab);
    }
    deferred_.clear();
  }
  for (auto [i, slab] : now) Ship(i, slab);
}

void SaveJob::ReleaseSlab(char* slab) {
  {
    // Count it returned before the pool can hand it out again.
    absl::MutexLock lock(&mu_);
    held_ -= deps_.pool->SizeOf(slab);
  }
  deps_.pool->Release(slab);
}

void SaveJob::ChunkInStaging(size_t i, char* slab, const Status& s) {
  if (!s.ok()) {
    ReleaseSlab(slab);
    ChunkDone(s);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!draining_) {
      deferred_.emplace_back(i, slab);
      return;
    }
    if (!TakeSlotLocked(i, slab)) return;
  }
  Ship(i, slab);
}

bool SaveJob::TakeSlotLocked(size_t i, char* slab) {
  if (deps_.ship_window != 0 && shipping_ >= deps_.ship_window) {
    waiting_.emplace_back(i, slab);
    return false;
  }
  peak_shipping_ = std::max(peak_shipping_, ++shipping_);
  CountOverlapLocked(i);
  return true;
}

void SaveJob::Shipped(const Status& s) {
  std::optional<std::pair<size_t, char*>> next;
  {
    absl::MutexLock lock(&mu_);
    if (waiting_.empty()) {
      --shipping_;
    } else {
      // The slot passes straight to the longest waiting chunk.
      next = waiting_.front();
      waiting_.pop_front();
      CountOverlapLocked(next->first);
    }
  }
  ChunkDone(s);
  if (next) Ship(next->first, next->second);
}

void SaveJob::ReferenceUnchanged(size_t i, const format::ChunkId& id) {
  const SaveChunk& c = chunks_[i];
  c.ref->set_id(id.ToBytes());
  c.ref->set_raw_length(c.len);
  ++put_stats_.chunks_unchanged;
  ++put_stats_.chunks;
  put_stats_.bytes_raw += c.len;
  deps_.shaping->Skip(c.len);  // its share of the schedule, not sent
  outcomes_[i].unchanged = true;
  outcomes_[i].at_home = true;
}

void SaveJob::CountOverlapLocked(size_t i) {
  if (!snapshot_done_) overlapped_ += chunks_[i].len;
}

void SaveJob::Ship(size_t i, char* slab) {
  auto self = shared_from_this();
  deps_.pipeline->Submit([self, i, slab] {
    // CPU work waits while the job's collectives run, as its bytes do.
    // Only Cancel() (the Checkpointer closing) ends the wait early; the
    // chunk then goes on and its put fails as the transport stops.
    self->deps_.shaping->AwaitCpu().IgnoreError();
    const SaveChunk& c = self->chunks_[i];
    // The checksum comes almost free with the fingerprint (the bytes are
    // read once); it is the payload's when the chunk goes raw.
    uint32_t crc32c = 0;
    format::ChunkId id = format::ChunkId::Of(slab, c.len, &crc32c);
    if (c.previous && *c.previous == id && self->HomeUp(c)) {
      // Same bytes as last time: the servers have them; reference, not
      // ship. (With one of them down, the chunk is shipped again so that
      // it keeps its copies.)
      self->ReferenceUnchanged(i, id);
      self->ReleaseSlab(slab);
      self->Shipped(absl::OkStatus());
      return;
    }
    if (c.keep_bytes) {
      self->outcomes_[i].bytes =
          std::make_shared<const std::string>(slab, c.len);
    }
    std::optional<DeltaBase> delta;
    const bool home_up = self->HomeUp(c);
    if (c.previous && c.previous_bytes && c.previous_bytes->size() == c.len &&
        home_up) {
      delta = DeltaBase{c.previous_bytes, *c.previous};
    } else if (c.base_not_held) {
      ++self->put_stats_.chunks_no_base;
    }
    // Home servers up now and still up when the copies are acknowledged:
    // the copies went to them, not to servers further down the ranking.
    const bool home_servers_up = self->ServersUp(c);
    auto released = std::make_shared<bool>(false);
    PutRequest r;
    r.ranked = &c.servers;
    r.replicas = self->deps_.replicas;
    r.data = slab;
    r.len = c.len;
    r.id = id;
    r.crc32c = crc32c;
    r.element_size = c.element_size;
    r.delta = delta ? &*delta : nullptr;
    if (c.previous && *c.previous != id) r.previous = *c.previous;
    r.ref = c.ref;
    r.stats = &self->put_stats_;
    r.in_memory = self->deps_.in_memory;
    self->deps_.io->PutAsync(
        r,
        [self, slab, released](bool still_in_use) {
          // Encoded into its own buffer: the slab can take the next chunk.
          if (!still_in_use) {
            *released = true;
            self->ReleaseSlab(slab);
          }
        },
        [self, i, slab, released, home_servers_up](const Status& st) {
          if (!*released) self->ReleaseSlab(slab);
          self->outcomes_[i].delta = !self->chunks_[i].ref->base_id().empty();
          self->outcomes_[i].at_home =
              st.ok() && home_servers_up && self->ServersUp(self->chunks_[i]);
          self->Shipped(st);
        });
  });
}

void SaveJob::ChunkDone(const Status& s) {
  absl::MutexLock lock(&mu_);
  if (!s.ok() && first_error_.ok()) first_error_ = s;
  --unfinished_;
}

}  // namespace stagger::client
