#include "server/rebaser.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "format/crc32c.h"
#include "server/chunk_read.h"
#include "transport/buffer.h"
#include "util/log.h"

namespace stagger::server {

Status DecodeStoredChunk(MetaStore* meta, SegmentStore* segments,
                         const std::string& job, const format::ChunkId& id,
                         const ChunkMeta& chunk, char* out,
                         format::Codec* whole_codec, int max_depth) {
  // Down the chain to a whole chunk, then back up, two buffers at a time.
  struct Link {
    format::ChunkId id;
    StoredRecord record;
  };
  std::vector<Link> chain;
  format::ChunkId at = id;
  std::optional<ChunkMeta> known = chunk;
  for (;;) {
    STAGGER_ASSIGN_OR_RETURN(StoredRecord rec,
                             ReadChunk(meta, segments, job, at, known));
    known.reset();
    if (rec.header.raw_length != chunk.raw_length) {
      return absl::DataLossError(absl::StrCat(
          "chunk ", at.ToHex(), " has ", rec.header.raw_length,
          " bytes, the chunk it is a base of has ", chunk.raw_length));
    }
    const bool delta = format::IsDelta(rec.header.codec);
    format::ChunkId base;
    if (delta) {
      STAGGER_ASSIGN_OR_RETURN(base, format::DeltaBase(rec.payload.view()));
    }
    chain.push_back({at, std::move(rec)});
    if (!delta) break;
    if (static_cast<int>(chain.size()) > max_depth) {
      return absl::DataLossError(absl::StrCat(
          "chunk ", id.ToHex(), ": delta chain longer than ", max_depth));
    }
    at = base;
  }
  const size_t n = chunk.raw_length;
  std::string below, above;  // a whole chunk decodes straight into `out`
  if (chain.size() > 1) {
    below.resize(n);
    above.resize(n);
  }
  for (size_t i = chain.size(); i-- > 0;) {
    const Link& l = chain[i];
    char* dest = i == 0 ? out : above.data();
    if (i + 1 == chain.size()) {
      if (whole_codec != nullptr) *whole_codec = l.record.header.codec;
      STAGGER_RETURN_IF_ERROR(format::Decode(l.record.header.codec,
                                             l.record.payload.view(), dest, n));
    } else {
      STAGGER_RETURN_IF_ERROR(format::DecodeDelta(
          l.record.header.codec, l.record.payload.view(), below, dest, n));
    }
    if (format::ChunkId::Of(dest, n) != l.id) {
      return absl::DataLossError(absl::StrCat(
          "chunk ", l.id.ToHex(), " decodes to other bytes than its id"));
    }
    if (i != 0) std::swap(below, above);
  }
  return absl::OkStatus();
}

Rebaser::Rebaser(SegmentStore* segments, MetaStore* meta,
                 const RebaserOptions& options)
    : segments_(segments), meta_(meta), options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

Rebaser::~Rebaser() {
  {
    absl::MutexLock l(&mu_);
    // A restart should not leave the last save's chunks unrebased, nor
    // wait long for a deep queue.
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](Rebaser* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
              return r->queue_.empty() && !r->busy_;
            },
            this),
        absl::Seconds(5));
    stop_ = true;
    queue_.clear();
  }
  if (yield_ != nullptr) yield_->Cancel();
  thread_.join();
}

void Rebaser::Enqueue(const std::string& job, const format::ChunkId& id) {
  Push(Item{job, id, std::nullopt, 1});
}

void Rebaser::EnqueueWhole(const std::string& job, const format::ChunkId& id,
                           const format::ChunkId& previous,
                           uint8_t element_size) {
  Push(Item{job, id, previous, element_size});
}

void Rebaser::Push(Item item) {
  absl::MutexLock l(&mu_);
  if (stop_) return;
  if (queue_.size() >= options_.max_queue) {
    ++stats_.dropped;
    return;
  }
  ++pending_[item.job];
  queue_.push_back(std::move(item));
}

bool Rebaser::Keyframe(uint32_t hops, uint64_t behind, size_t n) const {
  return hops > options_.max_behind_hops ||
         static_cast<double>(behind) >
             options_.max_behind_ratio * static_cast<double>(n);
}

void Rebaser::Keep(const std::string& job, const format::ChunkId& b,
                   const ChunkMeta& bm) {
  if (!segments_->ShortLived(job, bm.location.segment)) return;
  auto move = [&]() -> Result<uint64_t> {
    STAGGER_ASSIGN_OR_RETURN(StoredRecord rec,
                             ReadChunk(meta_, segments_, job, b, bm));
    STAGGER_ASSIGN_OR_RETURN(
        ChunkMeta copy, Write(job, rec.header.codec, b, rec.header.raw_length,
                              rec.payload.view(), RecordLifetime::kLong));
    return meta_->RelocateChunks(job,
                                 {Relocation{b, bm.location, copy.location}});
  };
  Result<uint64_t> moved = move();
  // Collected or moved meanwhile: nothing to do.
  if (absl::IsNotFound(moved.status()) || (moved.ok() && *moved == 0)) return;
  if (!moved.ok()) {
    log::Warning("stagger-server",
                 absl::StrCat("job '", job, "': copying chunk ", b.ToHex(),
                              " out of its short-lived segment failed (its "
                              "rebase stands; compaction copies it later): ",
                              moved.status().message()));
    return;
  }
  Died(job, bm.location.record_size);
  absl::MutexLock l(&mu_);
  ++stats_.moved;
}

void Rebaser::Died(const std::string& job, uint64_t bytes) {
  if (compactor_ == nullptr || options_.reclaim_every_bytes == 0) return;
  {
    absl::MutexLock l(&mu_);
    uint64_t& died = died_[job];
    died += bytes;
    if (died < options_.reclaim_every_bytes) return;
    died = 0;
  }
  compactor_->ScheduleReclaim(job);
}

void Rebaser::Done(const std::string& job) {
  {
    absl::MutexLock l(&mu_);
    auto p = pending_.find(job);
    if (p != pending_.end() && --p->second > 0) return;
    if (p != pending_.end()) pending_.erase(p);
    auto d = died_.find(job);
    if (d == died_.end()) return;
    const bool any = d->second > 0;
    died_.erase(d);
    if (!any || compactor_ == nullptr) return;
  }
  compactor_->ScheduleReclaim(job);
}

Status Rebaser::Rebase(const Item& item) {
  return item.previous
             ? RebaseWhole(item.job, item.id, *item.previous, item.element_size)
             : RebaseOne(item.job, item.id);
}

void Rebaser::WaitIdle() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](Rebaser* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
        return r->stop_ || (r->queue_.empty() && !r->busy_);
      },
      this));
}

RebaserStats Rebaser::Stats() const {
  absl::MutexLock l(&mu_);
  RebaserStats s = stats_;
  s.queued = queue_.size();
  return s;
}

void Rebaser::SetClientTraffic(std::function<bool()> busy) {
  yield_ =
      std::make_unique<qos::BackgroundLimiter>(qos::BackgroundLimiterOptions{
          .clients_busy = std::move(busy),
          .max_yield_ns = absl::ToInt64Nanoseconds(options_.max_yield)});
}

void Rebaser::Loop() {
  // Behind the work clients wait for: ingest, reads, compaction.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  for (;;) {
    Item item;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](Rebaser* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
            return r->stop_ || !r->queue_.empty();
          },
          this));
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    if (yield_ != nullptr) {
      // CANCELLED when stopping: the rebase in hand still runs.
      yield_->Request(0, qos::Priority::kBackground).IgnoreError();
    }
    Status s = Rebase(item);
    // A relocation or a gc raced it: once more from the new entries.
    if (absl::IsAborted(s)) s = Rebase(item);
    Done(item.job);
    if (!s.ok() && !absl::IsAborted(s) && !absl::IsNotFound(s)) {
      log::Warning("stagger-server",
                   absl::StrCat("job '", item.job, "': rebase of chunk ",
                                item.id.ToHex(),
                                " failed (it stays a "
                                "delta of its previous version): ",
                                s.message()));
    }
    std::set<std::string> compact;
    {
      absl::MutexLock l(&mu_);
      if (absl::IsAborted(s)) {
        ++stats_.aborted;
      } else if (!s.ok() && !absl::IsNotFound(s)) {
        ++stats_.failed;
      } else if (s.ok()) {
        rebased_jobs_.insert(item.job);
      }
      if (queue_.empty() && compactor_ != nullptr) compact.swap(rebased_jobs_);
      // Still busy until the passes are queued: WaitIdle then covers them
      // being scheduled.
    }
    for (const std::string& job : compact) compactor_->Schedule(job);
    absl::MutexLock l(&mu_);
    busy_ = false;
  }
}

Result<ChunkMeta> Rebaser::Write(const std::string& job, format::Codec codec,
                                 const format::ChunkId& id, uint64_t raw_length,
                                 std::string_view payload,
                                 RecordLifetime lifetime) {
  format::RecordHeader h;
  h.codec = codec;
  h.chunk_id = id;
  h.raw_length = raw_length;
  h.encoded_length = payload.size();
  h.payload_crc32c = format::Crc32c(payload.data(), payload.size());
  transport::Buffer b = transport::Buffer::WithHeadroom(
      payload.size(), format::kRecordHeaderSize);
  if (!payload.empty()) std::memcpy(b.data(), payload.data(), payload.size());
  absl::Notification done;
  Result<ChunkLocation> where = absl::UnknownError("not written");
  segments_->Append(
      job, h, std::move(b),
      [&](Result<ChunkLocation> loc) {
        where = std::move(loc);
        done.Notify();
      },
      AppendOptions{.lifetime = lifetime});
  done.WaitForNotification();
  STAGGER_RETURN_IF_ERROR(where.status());
  {
    absl::MutexLock l(&mu_);
    stats_.bytes_written += payload.size();
  }
  ChunkMeta m;
  m.location = *where;
  m.raw_length = raw_length;
  m.stored_length = payload.size();
  m.codec = codec;
  return m;
}

namespace {

// Y's decoded bytes (`*yraw`) whole, in the codec B's whole version used
// (zstd where that was byte-grouped but Y's delta was not grouped): into
// `*ywhole` encoded, or moved there raw.
Result<format::Codec> EncodeWhole(format::Codec whole_codec, int w,
                                  const format::EncodeOptions& eo,
                                  std::string* yraw, std::string* ywhole) {
  if (whole_codec == format::Codec::kByteGroupZstd && w == 1) {
    whole_codec = format::Codec::kZstd;
  }
  if (whole_codec == format::Codec::kRaw) {
    *ywhole = std::move(*yraw);
    return format::Codec::kRaw;
  }
  return format::Encode(whole_codec, *yraw, ywhole, eo);
}

// B (`braw`) as a delta of Y (`ybytes`, chunk `y`), in the codec of Y's
// delta against B (`delta`, of `codec`): an XOR delta is its own reverse
// (the same payload naming Y as the base); a numeric one is encoded anew.
Result<format::Codec> ReverseDelta(format::Codec codec, std::string_view delta,
                                   const std::string& braw,
                                   const std::string& ybytes,
                                   const format::ChunkId& y,
                                   const format::EncodeOptions& eo,
                                   std::string* brev) {
  if (codec != format::Codec::kXorByteGroupZstd) {
    return format::EncodeDeltaWith(codec, braw, ybytes, y, brev, eo);
  }
  brev->assign(delta.data(), delta.size());
  const std::string yid = y.ToBytes();
  std::memcpy(&(*brev)[1], yid.data(), yid.size());
  return codec;
}

// A delta chunk Y and its base B, both decoded, Y checked against its id.
struct DecodedPair {
  ChunkMeta bm;       // B's metadata
  StoredRecord yrec;  // Y as stored: its delta is yrec.payload
  std::string braw, yraw;
  format::Codec whole_codec = format::Codec::kRaw;  // B's whole version
};

Result<DecodedPair> DecodePair(MetaStore* meta, SegmentStore* segments,
                               const std::string& job, const format::ChunkId& y,
                               const ChunkMeta& ym) {
  DecodedPair p;
  STAGGER_ASSIGN_OR_RETURN(p.yrec, ReadChunk(meta, segments, job, y, ym));
  const format::ChunkId b = *ym.base;
  STAGGER_ASSIGN_OR_RETURN(p.bm, meta->GetChunk(job, b));
  const size_t n = ym.raw_length;
  p.braw.assign(n, '\0');
  p.yraw.assign(n, '\0');
  STAGGER_RETURN_IF_ERROR(DecodeStoredChunk(meta, segments, job, b, p.bm,
                                            p.braw.data(), &p.whole_codec));
  STAGGER_RETURN_IF_ERROR(format::DecodeDelta(ym.codec, p.yrec.payload.view(),
                                              p.braw, p.yraw.data(), n));
  if (format::ChunkId::Of(p.yraw.data(), n) != y) {
    return absl::DataLossError(absl::StrCat(
        "delta chunk ", y.ToHex(), " decodes to other bytes than its id"));
  }
  return p;
}

}  // namespace

Status Rebaser::RebaseOne(const std::string& job, const format::ChunkId& y) {
  STAGGER_ASSIGN_OR_RETURN(ChunkMeta ym, meta_->GetChunk(job, y));
  if (!format::IsDelta(ym.codec) || !ym.base) return absl::OkStatus();
  STAGGER_ASSIGN_OR_RETURN(DecodedPair p,
                           DecodePair(meta_, segments_, job, y, ym));
  const std::string_view delta = p.yrec.payload.view();
  const format::ChunkId b = *ym.base;
  const ChunkMeta& bm = p.bm;
  const size_t n = ym.raw_length;
  std::string& yraw = p.yraw;
  const format::Codec whole_codec = p.whole_codec;
  const int w = static_cast<uint8_t>(delta[0]);
  format::EncodeOptions eo;
  eo.zstd_level = options_.zstd_level;
  eo.element_size = w == 1 ? 4 : w;

  // 1. Y whole, in the codec its base's whole version used.
  std::string ywhole;
  STAGGER_ASSIGN_OR_RETURN(format::Codec yc,
                           EncodeWhole(whole_codec, w, eo, &yraw, &ywhole));
  // 2. B as a delta of Y, unless B is to stay as it is.
  std::string brev;
  format::Codec bc = ym.codec;
  bool reverse = !bm.base.has_value();
  if (reverse) {
    const std::string& ybytes = yc == format::Codec::kRaw ? ywhole : yraw;
    STAGGER_ASSIGN_OR_RETURN(
        bc, ReverseDelta(ym.codec, delta, p.braw, ybytes, y, eo, &brev));
    reverse = format::IsDelta(bc) && brev.size() < bm.stored_length;
  }
  const uint32_t hops = bm.behind_hops + 1;
  const uint64_t behind = bm.behind_bytes + brev.size();
  if (reverse && Keyframe(hops, behind, n)) reverse = false;

  std::vector<Restored> changes;
  Compactor::RemovalHold hold = HoldRemovals();
  STAGGER_ASSIGN_OR_RETURN(
      ChunkMeta ynew, Write(job, yc, y, n, ywhole, RecordLifetime::kRebased));
  if (reverse) {
    ynew.behind_hops = hops;
    ynew.behind_bytes = behind;
  }
  changes.push_back({y, ym.location, ynew});
  if (reverse) {
    STAGGER_ASSIGN_OR_RETURN(ChunkMeta bnew,
                             Write(job, bc, b, n, brev, RecordLifetime::kLong));
    bnew.base = y;
    changes.push_back({b, bm.location, bnew});
  }
  STAGGER_RETURN_IF_ERROR(meta_->Restore(job, changes));
  Died(job, ym.location.record_size + (reverse ? bm.location.record_size : 0));
  if (!reverse) Keep(job, b, bm);
  absl::MutexLock l(&mu_);
  if (reverse) {
    ++stats_.rebased;
  } else {
    ++stats_.keyframes;
  }
  return absl::OkStatus();
}

Status Rebaser::RebaseWhole(const std::string& job, const format::ChunkId& y,
                            const format::ChunkId& b, uint8_t element_size) {
  if (y == b) return absl::OkStatus();
  STAGGER_ASSIGN_OR_RETURN(ChunkMeta ym, meta_->GetChunk(job, y));
  if (format::IsDelta(ym.codec) || ym.base) return absl::OkStatus();
  Result<ChunkMeta> found = meta_->GetChunk(job, b);
  if (absl::IsNotFound(found.status())) return absl::OkStatus();
  STAGGER_RETURN_IF_ERROR(found.status());
  const ChunkMeta bm = *found;
  if (format::IsDelta(bm.codec) || bm.base || bm.raw_length != ym.raw_length) {
    return absl::OkStatus();
  }
  const size_t n = ym.raw_length;
  std::string yraw(n, '\0'), braw(n, '\0');
  STAGGER_RETURN_IF_ERROR(
      DecodeStoredChunk(meta_, segments_, job, y, ym, yraw.data()));
  STAGGER_RETURN_IF_ERROR(
      DecodeStoredChunk(meta_, segments_, job, b, bm, braw.data()));
  format::EncodeOptions eo;
  eo.zstd_level = options_.zstd_level;
  eo.element_size = element_size;
  const double keep = 1 - kMinGain;

  // B as a delta of Y, unless that is no smaller or B is a keyframe. Y
  // stays as it came: the newest version loads as the client chose.
  std::string brev;
  STAGGER_ASSIGN_OR_RETURN(format::Codec bc,
                           format::EncodeDelta(braw, yraw, y, &brev, eo));
  bool reverse =
      format::IsDelta(bc) && static_cast<double>(brev.size()) <
                                 keep * static_cast<double>(bm.stored_length);
  const uint32_t hops = bm.behind_hops + 1;
  const uint64_t behind = bm.behind_bytes + brev.size();
  if (reverse && Keyframe(hops, behind, n)) reverse = false;
  if (!reverse) {
    {
      absl::MutexLock l(&mu_);
      ++stats_.keyframes;
    }
    Compactor::RemovalHold hold = HoldRemovals();
    Keep(job, b, bm);
    return absl::OkStatus();
  }
  ChunkMeta ynew = ym;
  ynew.behind_hops = hops;
  ynew.behind_bytes = behind;
  Compactor::RemovalHold hold = HoldRemovals();
  STAGGER_ASSIGN_OR_RETURN(ChunkMeta bnew,
                           Write(job, bc, b, n, brev, RecordLifetime::kLong));
  bnew.base = y;
  STAGGER_RETURN_IF_ERROR(
      meta_->Restore(job, {{y, ym.location, ynew}, {b, bm.location, bnew}}));
  Died(job, bm.location.record_size);
  absl::MutexLock l(&mu_);
  ++stats_.rebased;
  return absl::OkStatus();
}

}  // namespace stagger::server
