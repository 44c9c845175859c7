#include "server/storage/segment_store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/storage/internal/segment_files.h"
#include "server/storage/internal/segment_store_impl.h"
#include "util/log.h"

namespace stagger::server {
namespace {

using storage_internal::kStagingBytes;
using storage_internal::ListSegmentIds;
using storage_internal::SegmentFileName;
using storage_internal::ValidateJobName;
using storage_internal::Where;

// Reserve() keeps at most max(kMinReserve, held / 8) ahead of the records a
// segment holds, rounded up to the record alignment.
constexpr uint64_t kMinReserve = 64ull << 10;

// The least a file of `size` bytes reserved that way holds in records.
uint64_t RecordBytesAtLeast(uint64_t size) {
  const uint64_t slack = format::kRecordAlignment;
  const uint64_t eighth = size > slack ? (size - slack) / 9 * 8 : 0;
  const uint64_t fixed =
      size > kMinReserve + slack ? size - kMinReserve - slack : 0;
  return std::min(eighth, fixed);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

void SegmentStore::Impl::Append(const std::string& job,
                                const format::RecordHeader& h,
                                transport::Buffer payload, AppendCallback done,
                                const AppendOptions& options) {
  Pending p;
  p.job = job;
  p.header = h;
  p.lifetime = options.lifetime;
  p.done = std::move(done);
  p.rejected = ValidateJobName(job);
  if (p.rejected.ok()) {
    // Round-trip the header through the decoder: a record the store writes
    // must be one it can read back (codec, bounds, lengths).
    char encoded[format::kRecordHeaderSize];
    format::EncodeRecordHeader(h, encoded);
    p.rejected =
        format::DecodeRecordHeader(std::string_view(encoded, sizeof(encoded)))
            .status();
    if (p.rejected.ok() && !options.payload_checked) {
      p.rejected = format::VerifyPayload(h, payload.view());
    }
    // The name is valid here, so it is safe to quote.
    if (!p.rejected.ok()) {
      p.rejected = WithContext(p.rejected, absl::StrCat("append to job ", job));
    }
  }
  if (p.rejected.ok()) p.record_size = format::RecordSize(h.encoded_length);
  p.payload = std::move(payload);
  absl::MutexLock l(&mu_);
  queue_.push_back(std::move(p));
}

void SegmentStore::Impl::WriterLoop() {
  std::vector<iovec> iovs;
  for (transport::Buffer& b : staging_) iovs.push_back({b.data(), b.size()});
  // Failure is logged once by the file system and only costs speed: writes
  // from unregistered buffers take the plain path.
  fs_->RegisterBuffers(iovs).IgnoreError();
  while (true) {
    std::vector<Pending> batch;
    std::map<std::string, RollRequest> rolls;
    uint64_t rolls_asked = 0;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(this, &Impl::HasWorkOrStopping));
      rolls.swap(roll_);
      rolls_asked = rolls_asked_;
      if (queue_.empty() && rolls.empty()) break;  // stopping, all drained
      size_t bytes = 0;
      while (!queue_.empty()) {
        uint64_t next = queue_.front().record_size;
        if (!batch.empty() && bytes + next > options_.max_batch_bytes) break;
        bytes += next;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      ++batches_started_;
    }
    // Rolls first: the batch taken with them goes to new segments.
    if (!rolls.empty()) RollJobs(rolls);
    if (!batch.empty()) Commit(batch);
    absl::MutexLock l(&mu_);
    ++batches_done_;
    rolls_done_ = rolls_asked;
  }
  {
    absl::MutexLock l(&mu_);
    rolls_done_ = rolls_asked_;  // the loop below retires every segment
  }
  fs_->UnregisterBuffers();
  for (auto& [job, state] : jobs_) {
    for (auto& current : state.current) {
      if (current != nullptr) Trim(current.get());
      current.reset();
    }
  }
}

Result<SegmentStore::Impl::JobState*> SegmentStore::Impl::GetJob(
    const std::string& job) {
  auto it = jobs_.find(job);
  if (it != jobs_.end()) return &it->second;
  JobState state;
  auto ids = ListSegmentIds(fs_, JobDir(job));
  if (ids.ok()) {
    state.dir_exists = true;
    // Never append to a segment that existed before: its tail may be torn.
    if (!ids->empty()) state.next_id = ids->back() + 1;
  } else if (!absl::IsNotFound(ids.status())) {
    return WithContext(ids.status(), absl::StrCat("job ", job));
  }
  return &jobs_.emplace(job, std::move(state)).first->second;
}

Result<SegmentStore::Impl::Segment*> SegmentStore::Impl::SegmentFor(
    const std::string& job, RecordLifetime lifetime, uint64_t record_size,
    std::vector<std::unique_ptr<Segment>>* retired,
    std::set<std::string>* dirs_to_sync) {
  STAGGER_ASSIGN_OR_RETURN(JobState * js, GetJob(job));
  if (!js->dir_durable) dirs_to_sync->insert(options_.dir);
  std::unique_ptr<Segment>& current =
      js->current[static_cast<size_t>(lifetime)];
  const uint64_t limit =
      lifetime != RecordLifetime::kLong
          ? std::min(options_.segment_bytes, options_.short_lived_segment_bytes)
          : options_.segment_bytes;
  if (current != nullptr && current->size > 0 &&
      current->size + record_size > limit) {
    // Kept open until the batch has written and synced it.
    retired->push_back(std::move(current));
  }
  if (current == nullptr) {
    const std::string job_dir = JobDir(job);
    if (!js->dir_exists) {
      STAGGER_RETURN_IF_ERROR(fs_->CreateDirs(job_dir));
      js->dir_exists = true;
    }
    auto seg = std::make_unique<Segment>();
    seg->id = js->next_id++;
    seg->limit = limit;
    seg->path = JoinPath(job_dir, SegmentFileName(seg->id));
    // Before the file exists, so that a listing which sees the file also
    // sees it unsealed.
    Unseal(job, seg->id, lifetime);
    FileOptions fo;
    fo.create = fo.writable = fo.exclusive = true;
    fo.direct = true;
    STAGGER_ASSIGN_OR_RETURN(seg->file, fs_->Open(seg->path, fo));
    if (!seg->file->direct_io() && direct_.exchange(false)) {
      log::Warning("stagger storage",
                   absl::StrCat("O_DIRECT refused for ", seg->path,
                                "; segments are written through the page "
                                "cache"));
    }
    dirs_to_sync->insert(job_dir);
    current = std::move(seg);
  }
  return current.get();
}

Status SegmentStore::Impl::Place(std::vector<Pending>& batch, Batch* b) {
  for (Pending& p : batch) {
    if (!p.rejected.ok()) continue;
    STAGGER_ASSIGN_OR_RETURN(
        Segment * s, SegmentFor(p.job, p.lifetime, p.record_size, &b->retired,
                                &b->dirs_to_sync));
    if (std::find(b->touched.begin(), b->touched.end(), s) ==
        b->touched.end()) {
      b->touched.push_back(s);
    }
    b->placements.push_back(Placement{&p, s, s->size});
    s->size += p.record_size;
  }
  return absl::OkStatus();
}

Status SegmentStore::Impl::WriteAndSync(const Batch& b) {
  for (Segment* s : b.touched) Reserve(s);
  auto start = std::chrono::steady_clock::now();
  Status written = WriteSegments(b.touched, b.placements);
  write_seconds_.Observe(SecondsSince(start));
  STAGGER_RETURN_IF_ERROR(written);
  for (Segment* s : b.touched) {
    start = std::chrono::steady_clock::now();
    Status synced = s->file->Sync();
    sync_seconds_.Observe(SecondsSince(start));
    STAGGER_RETURN_IF_ERROR(synced);
  }
  return absl::OkStatus();
}

void SegmentStore::Impl::Settle(const Status& error, Batch& b) {
  if (error.ok()) {
    for (Segment* s : b.touched) s->durable = s->size;
    for (auto& s : b.retired) Trim(s.get());
    if (b.dirs_to_sync.count(options_.dir) != 0) {
      for (const Placement& pl : b.placements) {
        jobs_[pl.item->job].dir_durable = true;
      }
    }
    return;
  }
  // Nothing of this batch is acknowledged; its segments are never written
  // again, so no acknowledged record can follow a torn one.
  for (Segment* s : b.touched) Abandon(s);
  for (auto& [job, state] : jobs_) {
    for (auto& current : state.current) {
      if (current != nullptr && current->size != current->durable) {
        current.reset();
      }
    }
  }
}

void SegmentStore::Impl::Answer(std::vector<Pending>& batch, const Batch& b,
                                const Status& error) {
  size_t next = 0;
  for (Pending& p : batch) {
    if (!p.done) continue;
    if (!p.rejected.ok()) {
      p.done(p.rejected);
      continue;
    }
    if (!error.ok()) {
      p.done(error);
      continue;
    }
    while (b.placements[next].item != &p) ++next;
    const Placement& pl = b.placements[next];
    p.done(ChunkLocation{pl.segment->id, pl.offset, p.record_size});
  }
}

void SegmentStore::Impl::Commit(std::vector<Pending>& batch) {
  Batch b;
  Status error = Place(batch, &b);
  if (error.ok()) error = WriteAndSync(b);
  ++batches_;
  if (!error.ok()) {
    ++failed_batches_;
  } else {
    for (const Placement& pl : b.placements) {
      ++records_written_;
      bytes_written_ += pl.item->record_size;
    }
  }
  for (auto it = b.dirs_to_sync.begin();
       error.ok() && it != b.dirs_to_sync.end(); ++it) {
    error = fs_->SyncDir(*it);
  }
  Settle(error, b);
  Answer(batch, b, error);
  // Only now: the callbacks above have indexed this batch's records.
  Reseal();
}

void SegmentStore::Impl::RollJobs(
    const std::map<std::string, RollRequest>& jobs) {
  for (const auto& [job, request] : jobs) {
    auto it = jobs_.find(job);
    if (it == jobs_.end()) continue;
    // Every record placed in them was committed (and its callback run) by
    // the batches before this one.
    for (size_t i = 0; i < it->second.current.size(); ++i) {
      std::unique_ptr<Segment>& current = it->second.current[i];
      if ((request.mask & (1u << i)) == 0 || current == nullptr ||
          current->size < request.min_bytes) {
        continue;
      }
      Trim(current.get());
      current.reset();
    }
  }
  Reseal();
}

Status SegmentStore::Impl::Roll(const std::string& job, uint8_t mask,
                                uint64_t min_bytes, bool wait) {
  STAGGER_RETURN_IF_ERROR(ValidateJobName(job));
  absl::MutexLock l(&mu_);
  if (stopping_) return absl::UnavailableError("segment store is closing");
  RollRequest& r = roll_[job];
  r.mask |= mask;
  r.min_bytes = std::min(r.min_bytes, min_bytes);
  const uint64_t ticket = ++rolls_asked_;
  if (!wait) return absl::OkStatus();
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return rolls_done_ >= ticket;
  };
  mu_.Await(absl::Condition(&done));
  return absl::OkStatus();
}

void SegmentStore::Impl::Unseal(const std::string& job, uint64_t id,
                                RecordLifetime lifetime) {
  absl::MutexLock l(&seal_mu_);
  unsealed_[job][id] = lifetime;
  opened_[job][id] = lifetime;
}

bool SegmentStore::Impl::ShortLived(const std::string& job, uint64_t id) {
  {
    absl::MutexLock l(&seal_mu_);
    auto it = opened_.find(job);
    if (it != opened_.end()) {
      auto s = it->second.find(id);
      if (s != it->second.end()) return s->second != RecordLifetime::kLong;
    }
  }
  // A segment of an earlier run: judged by its size.
  if (!ValidateJobName(job).ok()) return false;
  auto file = OpenForRead(job, id);
  if (!file.ok()) return false;
  auto size = (*file)->Size();
  return size.ok() && *size <= std::min(options_.segment_bytes,
                                        options_.short_lived_segment_bytes);
}

void SegmentStore::Impl::Reseal() {
  absl::MutexLock l(&seal_mu_);
  for (auto it = unsealed_.begin(); it != unsealed_.end();) {
    it->second.clear();
    auto js = jobs_.find(it->first);
    if (js != jobs_.end()) {
      for (size_t i = 0; i < js->second.current.size(); ++i) {
        const auto& current = js->second.current[i];
        if (current != nullptr) {
          it->second[current->id] = static_cast<RecordLifetime>(i);
        }
      }
    }
    if (it->second.empty()) {
      it = unsealed_.erase(it);
    } else {
      ++it;
    }
  }
}

std::map<uint64_t, RecordLifetime> SegmentStore::Impl::Unsealed(
    const std::string& job) {
  absl::MutexLock l(&seal_mu_);
  auto it = unsealed_.find(job);
  return it == unsealed_.end() ? std::map<uint64_t, RecordLifetime>()
                               : it->second;
}

Result<std::vector<SegmentInfo>> SegmentStore::Impl::ListSealedSegments(
    const std::string& job) {
  return ListSegments(job, /*sealed_only=*/true);
}

Result<std::vector<SegmentInfo>> SegmentStore::Impl::ListSegments(
    const std::string& job, bool sealed_only) {
  STAGGER_RETURN_IF_ERROR(ValidateJobName(job));
  {
    // A caller whose append callback has run sees its effect: wait for the
    // batch being committed to finish resealing.
    absl::MutexLock l(&mu_);
    const uint64_t started = batches_started_;
    auto done = [this, started]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return batches_done_ >= started;
    };
    mu_.Await(absl::Condition(&done));
  }
  std::vector<SegmentInfo> out;
  auto ids = ListSegmentIds(fs_, JobDir(job));
  if (absl::IsNotFound(ids.status())) return out;
  if (!ids.ok()) return WithContext(ids.status(), absl::StrCat("job ", job));
  // Read after listing: a segment created since is either missing from the
  // listing or already marked unsealed (Unseal runs before its creation).
  const std::map<uint64_t, RecordLifetime> unsealed = Unsealed(job);
  for (uint64_t id : *ids) {
    auto open = unsealed.find(id);
    const bool sealed = open == unsealed.end();
    if (sealed_only && !sealed) continue;
    auto file = OpenForRead(job, id);
    if (absl::IsNotFound(file.status())) continue;  // removed meanwhile
    if (!file.ok()) return WithContext(file.status(), Where(job, id, 0));
    auto size = (*file)->Size();
    if (!size.ok()) return WithContext(size.status(), Where(job, id, 0));
    out.push_back(SegmentInfo{id, *size, sealed,
                              sealed ? RecordLifetime::kLong : open->second,
                              sealed ? *size : RecordBytesAtLeast(*size)});
  }
  return out;
}

Status SegmentStore::Impl::RemoveSegment(const std::string& job, uint64_t id) {
  STAGGER_RETURN_IF_ERROR(ValidateJobName(job));
  if (Unsealed(job).count(id) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job, " segment ", id, " is not sealed: appends may reach it"));
  }
  const std::string dir = JobDir(job);
  STAGGER_RETURN_IF_ERROR(fs_->Remove(JoinPath(dir, SegmentFileName(id))));
  {
    absl::MutexLock l(&seal_mu_);
    auto it = opened_.find(job);
    if (it != opened_.end()) {
      it->second.erase(id);
      if (it->second.empty()) opened_.erase(it);
    }
  }
  // Makes the reclaim durable; if this is lost, the segment comes back
  // with no indexed record and the next compaction removes it again.
  return fs_->SyncDir(dir);
}

void SegmentStore::Impl::Reserve(Segment* segment) {
  const uint64_t step = options_.preallocate_bytes;
  if (!preallocate_ || step == 0 || segment->allocated >= segment->size) {
    return;
  }
  // An eighth of what the segment already holds (at least kMinReserve), up
  // to `step`: a job that writes little reserves little, and what a job
  // holds on disk stays within about 1/8 of what it stored.
  const uint64_t ahead =
      std::min(step, std::max(kMinReserve, segment->size / 8));
  uint64_t target = (segment->size + ahead + format::kRecordAlignment - 1) /
                    format::kRecordAlignment * format::kRecordAlignment;
  target =
      std::max(segment->size,
               std::min(target, std::max(segment->limit, segment->allocated)));
  Result<bool> reserved =
      segment->file->Allocate(segment->allocated, target - segment->allocated);
  if (reserved.ok() && *reserved) {
    segment->allocated = target;
  } else if (reserved.ok()) {
    preallocate_ = false;  // this file system cannot; stop asking
  }
  // RESOURCE_EXHAUSTED and the rest: the writes themselves say whether the
  // bytes fit.
}

void SegmentStore::Impl::Trim(Segment* segment) {
  if (segment->allocated <= segment->durable) return;
  // A cut that fails leaves zeros after the last record: Scan ends there,
  // and the compactor counts them as dead bytes.
  if (fs_->Truncate(segment->path, segment->durable).ok()) {
    segment->allocated = segment->durable;
  }
}

void SegmentStore::Impl::Abandon(Segment* segment) {
  segment->file.reset();
  if (segment->durable == 0) {
    // Holds no acknowledged record. Best effort: a leftover empty or torn
    // segment is harmless to readers and Scan.
    fs_->Remove(segment->path).IgnoreError();
  }
}

Status SegmentStore::Impl::WriteSegments(
    const std::vector<Segment*>& touched,
    const std::vector<Placement>& placements) {
  std::vector<Piece> pieces;
  size_t buf = 0;   // staging buffer being filled
  size_t used = 0;  // bytes in it
  auto emit = [&](Segment* seg, uint64_t* offset) -> Status {
    pieces.push_back(Piece{seg, *offset, staging_[buf].data(), used});
    *offset += used;
    used = 0;
    if (++buf == staging_.size()) {
      buf = 0;
      return FlushPieces(&pieces);
    }
    return absl::OkStatus();
  };
  for (Segment* seg : touched) {
    uint64_t offset = UINT64_MAX;  // file offset of the next piece
    for (const Placement& pl : placements) {
      if (pl.segment != seg) continue;
      if (offset == UINT64_MAX) offset = pl.offset;
      Pending& p = *pl.item;
      if (char* record = InPlaceRecord(p); record != nullptr) {
        // Written from the buffer it arrived in: no copy.
        if (used > 0) STAGGER_RETURN_IF_ERROR(emit(seg, &offset));
        pieces.push_back(Piece{seg, offset, record, p.record_size});
        offset += p.record_size;
        continue;
      }
      char header[format::kRecordHeaderSize];
      format::EncodeRecordHeader(p.header, header);
      const uint64_t payload_end =
          format::kRecordHeaderSize + p.header.encoded_length;
      // The record is header | payload | zeros; copy it in slices that fit
      // the staging buffers.
      for (uint64_t pos = 0; pos < p.record_size;) {
        char* dst = staging_[buf].data() + used;
        size_t n =
            std::min<uint64_t>(p.record_size - pos, kStagingBytes - used);
        for (size_t k = 0; k < n;) {
          uint64_t at = pos + k;
          size_t m;
          if (at < format::kRecordHeaderSize) {
            m = std::min<uint64_t>(n - k, format::kRecordHeaderSize - at);
            std::memcpy(dst + k, header + at, m);
          } else if (at < payload_end) {
            m = std::min<uint64_t>(n - k, payload_end - at);
            std::memcpy(dst + k,
                        p.payload.data() + (at - format::kRecordHeaderSize), m);
          } else {
            m = n - k;
            std::memset(dst + k, 0, m);
          }
          k += m;
        }
        pos += n;
        used += n;
        if (used == kStagingBytes) STAGGER_RETURN_IF_ERROR(emit(seg, &offset));
      }
    }
    // Pieces never span segments.
    if (used > 0) STAGGER_RETURN_IF_ERROR(emit(seg, &offset));
  }
  return FlushPieces(&pieces);
}

char* SegmentStore::Impl::InPlaceRecord(Pending& p) {
  transport::Buffer& b = p.payload;
  if (b.headroom() != format::kRecordHeaderSize ||
      b.capacity() + b.headroom() < p.record_size) {
    return nullptr;
  }
  char* record = b.data() - format::kRecordHeaderSize;
  format::EncodeRecordHeader(p.header, record);
  const size_t payload_end = format::kRecordHeaderSize + b.size();
  std::memset(record + payload_end, 0, p.record_size - payload_end);
  return record;
}

Status SegmentStore::Impl::FlushPieces(std::vector<Piece>* pieces) {
  // One batched call per segment; each keeps its pieces in flight together.
  std::vector<WriteRequest> writes;
  for (size_t i = 0; i < pieces->size();) {
    Segment* seg = (*pieces)[i].segment;
    writes.clear();
    for (; i < pieces->size() && (*pieces)[i].segment == seg; ++i) {
      const Piece& pc = (*pieces)[i];
      writes.push_back(WriteRequest{pc.offset, pc.data, pc.len});
    }
    Status s = seg->file->WriteAt(writes);
    if (!s.ok()) {
      pieces->clear();
      return s;
    }
  }
  pieces->clear();
  return absl::OkStatus();
}

SegmentStore::SegmentStore(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

SegmentStore::~SegmentStore() = default;

Result<std::unique_ptr<SegmentStore>> SegmentStore::Open(
    const SegmentStoreOptions& options) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError("segment store: empty dir");
  }
  if (options.segment_bytes == 0 || options.short_lived_segment_bytes == 0 ||
      options.max_batch_bytes == 0 || options.queue_depth == 0) {
    return absl::InvalidArgumentError(
        "segment store: segment_bytes, short_lived_segment_bytes, "
        "max_batch_bytes and queue_depth must be > 0");
  }
  std::unique_ptr<FileSystem> owned;
  FileSystem* fs = options.fs;
  if (fs == nullptr) {
    STAGGER_ASSIGN_OR_RETURN(
        owned,
        NewDefaultFileSystem(static_cast<unsigned>(options.queue_depth)));
    fs = owned.get();
  }
  STAGGER_RETURN_IF_ERROR(
      WithContext(fs->CreateDirs(options.dir), "segment store"));
  return std::unique_ptr<SegmentStore>(
      new SegmentStore(std::make_unique<Impl>(options, std::move(owned))));
}

void SegmentStore::Append(const std::string& job, const format::RecordHeader& h,
                          transport::Buffer payload, AppendCallback done,
                          const AppendOptions& options) {
  impl_->Append(job, h, std::move(payload), std::move(done), options);
}

Result<StoredRecord> SegmentStore::Read(const std::string& job,
                                        const ChunkLocation& loc,
                                        const IOOptions& io) {
  return impl_->Read(job, loc, io);
}

Status SegmentStore::Scan(
    const std::string& job,
    const std::function<void(const format::RecordHeader&,
                             const ChunkLocation&)>& on_record,
    const std::function<void(const Status&)>& on_error) {
  return impl_->Scan(job, on_record, on_error);
}

Result<std::vector<SegmentInfo>> SegmentStore::ListSealedSegments(
    const std::string& job) {
  return impl_->ListSealedSegments(job);
}

Result<std::vector<SegmentInfo>> SegmentStore::ListSegments(
    const std::string& job) {
  return impl_->ListSegments(job, /*sealed_only=*/false);
}

Status SegmentStore::Roll(const std::string& job) {
  return impl_->Roll(job, 0xff, 0, /*wait=*/true);
}

Status SegmentStore::Roll(const std::string& job, RecordLifetime lifetime) {
  return impl_->Roll(job, 1u << static_cast<unsigned>(lifetime), 0,
                     /*wait=*/true);
}

void SegmentStore::RequestRoll(const std::string& job, RecordLifetime lifetime,
                               uint64_t min_bytes) {
  // An invalid name or a closing store: nothing to roll.
  impl_
      ->Roll(job, 1u << static_cast<unsigned>(lifetime), min_bytes,
             /*wait=*/false)
      .IgnoreError();
}

Status SegmentStore::RemoveSegment(const std::string& job, uint64_t id) {
  return impl_->RemoveSegment(job, id);
}

bool SegmentStore::ShortLived(const std::string& job, uint64_t id) {
  return impl_->ShortLived(job, id);
}

bool SegmentStore::direct_io() const { return impl_->direct_io(); }

FileSystem* SegmentStore::file_system() const { return impl_->fs(); }

SegmentStoreStats SegmentStore::Stats() const { return impl_->Stats(); }

SegmentStoreStats SegmentStore::Impl::Stats() const {
  SegmentStoreStats s;
  s.records_written = records_written_.load();
  s.bytes_written = bytes_written_.load();
  s.batches = batches_.load();
  s.failed_batches = failed_batches_.load();
  {
    absl::MutexLock l(&mu_);
    s.queued = queue_.size();
  }
  s.io_in_flight = fs_->RequestsInFlight();
  s.write_seconds = write_seconds_.Take();
  s.sync_seconds = sync_seconds_.Take();
  return s;
}

}  // namespace stagger::server
