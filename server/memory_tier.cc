#include "server/memory_tier.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace stagger::server {

MemoryTier::MemoryTier(uint64_t max_bytes, absl::Duration write_delay)
    : max_bytes_(max_bytes), write_delay_(write_delay) {
  stats_.limit_bytes = max_bytes;
}

std::string MemoryTier::Key(const std::string& job, const format::ChunkId& id) {
  return absl::StrCat(job, "/", id.ToHex());
}

bool MemoryTier::MakeRoom(uint64_t need) {
  if (need > max_bytes_) return false;
  // What is not memory-only is on disk, and evictable: would evicting all
  // of it do? Then evict from the least recently used end.
  if (stats_.memory_only_bytes + need > max_bytes_) return false;
  while (stats_.bytes + need > max_bytes_) {
    Drop(entries_.find(lru_.back()));
    ++stats_.evicted_total;
  }
  return true;
}

void MemoryTier::Drop(std::map<std::string, Entry>::iterator it) {
  const uint64_t n = it->second.rec.header.encoded_length;
  JobUsage& u = stats_.jobs[it->second.rec.job];
  u.bytes -= n;
  --u.chunks;
  if (!it->second.on_disk) u.memory_only_bytes -= n;
  if (u.chunks == 0) stats_.jobs.erase(it->second.rec.job);
  if (it->second.on_disk) lru_.erase(it->second.lru);
  stats_.bytes -= n;
  --stats_.chunks;
  if (!it->second.on_disk) stats_.memory_only_bytes -= n;
  entries_.erase(it);
}

bool MemoryTier::Hold(const std::string& job, const format::RecordHeader& h,
                      std::optional<format::ChunkId> base,
                      transport::Buffer* payload) {
  const std::string key = Key(job, h.chunk_id);
  absl::MutexLock l(&mu_);
  const uint64_t n = h.encoded_length;
  if (auto it = entries_.find(key); it != entries_.end()) {
    // Held on disk once, but the caller found it in no index (a gc deleted
    // it since): held bytes are the chunk's; they go to disk again.
    if (it->second.on_disk) MarkMemoryOnly(it->second);
    return true;
  }
  if (!MakeRoom(n)) {
    ++stats_.refused_total;
    return false;
  }
  Entry& e = entries_[key];
  e.rec.job = job;
  e.rec.header = h;
  e.rec.base = base;
  payload->Attach(nullptr);
  e.rec.payload =
      std::make_shared<const transport::Buffer>(std::move(*payload));
  e.held_at = absl::Now();
  queue_.push_back(key);
  JobUsage& u = stats_.jobs[job];
  u.bytes += n;
  u.memory_only_bytes += n;
  ++u.chunks;
  stats_.bytes += n;
  stats_.memory_only_bytes += n;
  ++stats_.chunks;
  ++stats_.held_total;
  cv_.SignalAll();
  return true;
}

std::optional<MemoryTier::Record> MemoryTier::Find(const std::string& job,
                                                   const format::ChunkId& id) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(Key(job, id));
  if (it == entries_.end()) return std::nullopt;
  if (it->second.on_disk) lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++stats_.reads_total;
  return it->second.rec;
}

std::optional<MemoryTier::Record> MemoryTier::Peek(
    const std::string& job, const format::ChunkId& id) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(Key(job, id));
  if (it == entries_.end()) return std::nullopt;
  return it->second.rec;
}

MemoryTier::State MemoryTier::StateOf(const std::string& job,
                                      const format::ChunkId& id) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(Key(job, id));
  if (it == entries_.end()) return State::kAbsent;
  return it->second.on_disk ? State::kOnDisk : State::kMemoryOnly;
}

void MemoryTier::WriteAllNow() {
  absl::MutexLock l(&mu_);
  write_delay_ = absl::ZeroDuration();
  cv_.SignalAll();
}

std::optional<MemoryTier::Record> MemoryTier::NextToWrite() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    // Keys whose chunk went to disk another way are skipped.
    while (!queue_.empty()) {
      auto it = entries_.find(queue_.front());
      if (it != entries_.end() && !it->second.on_disk) break;
      queue_.pop_front();
    }
    if (queue_.empty()) {
      cv_.Wait(&mu_);
      continue;
    }
    Entry& e = entries_.find(queue_.front())->second;
    const absl::Time due = std::max(e.held_at + write_delay_, e.not_before);
    if (absl::Now() < due) {
      cv_.WaitWithDeadline(&mu_, due);
      continue;
    }
    queue_.pop_front();
    e.writing = true;
    return e.rec;
  }
  return std::nullopt;
}

void MemoryTier::MarkMemoryOnly(Entry& e) {
  e.on_disk = false;
  lru_.erase(e.lru);
  const uint64_t n = e.rec.header.encoded_length;
  stats_.jobs[e.rec.job].memory_only_bytes += n;
  stats_.memory_only_bytes += n;
  e.held_at = absl::Now();
  queue_.push_back(Key(e.rec.job, e.rec.header.chunk_id));
  cv_.SignalAll();
}

void MemoryTier::MarkOnDisk(Entry& e) {
  if (e.on_disk) return;
  e.on_disk = true;
  lru_.push_front(Key(e.rec.job, e.rec.header.chunk_id));
  e.lru = lru_.begin();
  const uint64_t n = e.rec.header.encoded_length;
  stats_.jobs[e.rec.job].memory_only_bytes -= n;
  stats_.memory_only_bytes -= n;
}

void MemoryTier::Written(const std::string& job, const format::ChunkId& id,
                         const Status& s) {
  const std::string key = Key(job, id);
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  it->second.writing = false;
  if (s.ok()) {
    ++stats_.written_total;
    MarkOnDisk(it->second);
  } else if (!it->second.on_disk) {
    ++stats_.write_failures_total;
    last_write_error_ = s;
    it->second.not_before = absl::Now() + kRetryDelay;
    queue_.push_back(key);
  }
  cv_.SignalAll();
}

void MemoryTier::StoredElsewhere(const std::string& job,
                                 const format::ChunkId& id) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(Key(job, id));
  if (it == entries_.end()) return;
  MarkOnDisk(it->second);
  cv_.SignalAll();
}

Status MemoryTier::WaitWritten(const std::string& job,
                               const std::vector<format::ChunkId>& ids,
                               absl::Time deadline) {
  std::vector<std::string> keys;
  keys.reserve(ids.size());
  for (const auto& id : ids) keys.push_back(Key(job, id));
  absl::MutexLock l(&mu_);
  for (;;) {
    size_t left = 0;
    for (const auto& k : keys) {
      auto it = entries_.find(k);
      if (it != entries_.end() && !it->second.on_disk) ++left;
    }
    if (left == 0) return absl::OkStatus();
    if (stopping_ || absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          left, " chunks of job '", job, "' are still in memory only",
          last_write_error_.ok() ? "" : "; the last write behind failed: ",
          last_write_error_.ok() ? "" : last_write_error_.message()));
    }
    cv_.WaitWithDeadline(&mu_, deadline);
  }
}

Status MemoryTier::WaitJobWritten(const std::string& job, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  for (;;) {
    auto it = stats_.jobs.find(job);
    const uint64_t left =
        it == stats_.jobs.end() ? 0 : it->second.memory_only_bytes;
    if (left == 0) return absl::OkStatus();
    if (stopping_ || absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          left, " bytes of job '", job, "' are still in memory only",
          last_write_error_.ok() ? "" : "; the last write behind failed: ",
          last_write_error_.ok() ? "" : last_write_error_.message()));
    }
    cv_.WaitWithDeadline(&mu_, deadline);
  }
}

void MemoryTier::Stop() {
  absl::MutexLock l(&mu_);
  stopping_ = true;
  cv_.SignalAll();
}

MemoryTier::Stats MemoryTier::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

}  // namespace stagger::server
