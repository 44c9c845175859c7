// MemoryTier: chunks of the newest saves held in this server's RAM
// (stagger-server --memory-bytes), served from there, and written to the
// disk behind (DataService's write-behind thread).
//
//   put flagged in_memory ─► Hold() ─► acknowledged at once
//                                 └──► NextToWrite() ─► segment store
//                                                  └──► Written(): on disk
//
// A held chunk is "memory-only" until Written() says it is on disk; only
// then may it be evicted. Eviction is least recently written or read
// first, when a Hold() needs the room. A Hold() that would not fit once every
// evictable chunk is gone is refused: the put then goes to disk as one
// without the flag (acknowledged when durable), so memory is never the
// reason an acknowledged chunk is lost, and a full tier slows saves to the
// disk's pace instead of failing them.
//
// Thread-safety: thread-safe.
#ifndef STAGGER_SERVER_MEMORY_TIER_H_
#define STAGGER_SERVER_MEMORY_TIER_H_

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "format/chunk_id.h"
#include "format/record.h"
#include "stagger/status.h"
#include "transport/buffer.h"

namespace stagger::server {

class MemoryTier {
 public:
  struct Record {
    std::string job;
    format::RecordHeader header;
    std::optional<format::ChunkId> base;  // a delta's base
    std::shared_ptr<const transport::Buffer> payload;
  };
  enum class State { kAbsent, kMemoryOnly, kOnDisk };

  struct JobUsage {
    uint64_t bytes = 0;              // payload bytes held
    uint64_t memory_only_bytes = 0;  // of which not yet on disk
    uint64_t chunks = 0;
  };
  struct Stats {
    uint64_t limit_bytes = 0;
    uint64_t bytes = 0;
    uint64_t memory_only_bytes = 0;
    uint64_t chunks = 0;
    uint64_t held_total = 0;     // chunks held (puts acknowledged from RAM)
    uint64_t refused_total = 0;  // Hold()s refused for room
    uint64_t evicted_total = 0;  // on-disk chunks dropped for room
    uint64_t written_total = 0;  // chunks written behind
    uint64_t write_failures_total = 0;
    uint64_t reads_total = 0;  // Find()s that found a chunk
    std::map<std::string, JobUsage> jobs;
  };

  // Holds at most `max_bytes` of encoded chunks; a held chunk is handed to
  // the write-behind `write_delay` after it came (0: at once).
  static constexpr absl::Duration kRetryDelay = absl::Seconds(1);

  explicit MemoryTier(uint64_t max_bytes,
                      absl::Duration write_delay = absl::ZeroDuration());

  uint64_t limit_bytes() const { return max_bytes_; }

  // Holds chunk `h.chunk_id` of `job` (its encoded bytes in `payload`),
  // memory-only, queued for writing behind. Evicts on-disk chunks for the
  // room. false (nothing held, `payload` untouched) when it does not fit;
  // true also when the chunk is already held (the new copy is dropped; a
  // held copy taken for on disk is written again: the caller holds it in
  // no index).
  // A held payload loses its attachment (the admission charge of a
  // received payload): the tier's bound takes over.
  bool Hold(const std::string& job, const format::RecordHeader& h,
            std::optional<format::ChunkId> base, transport::Buffer* payload);

  // The held record of chunk `id` of `job` (counts a read, and makes it the
  // most recently used).
  std::optional<Record> Find(const std::string& job, const format::ChunkId& id);
  State StateOf(const std::string& job, const format::ChunkId& id) const;
  // As Find, without counting a read or touching the order of eviction.
  std::optional<Record> Peek(const std::string& job,
                             const format::ChunkId& id) const;

  // The oldest memory-only chunk held at least the write delay and not
  // being written, marked as being written; waits for one. nullopt once
  // Stop() was called.
  std::optional<Record> NextToWrite();
  // From now on every memory-only chunk is due at once (shutdown).
  void WriteAllNow();
  // The write of `id` ended: OK: on disk, evictable; an error: it stays
  // memory-only and goes back in the queue (tried again after the others,
  // and not within kRetryDelay),
  // and waiters of Flush see the error.
  void Written(const std::string& job, const format::ChunkId& id,
               const Status& s);
  // A put without the flag stored chunk `id` on disk: if held, it need
  // not be written behind.
  void StoredElsewhere(const std::string& job, const format::ChunkId& id);

  // Waits (until `deadline`) while any of `ids` of `job` is memory-only.
  // OK once none is; DEADLINE_EXCEEDED naming how many are left, with the
  // last write error if there was one.
  Status WaitWritten(const std::string& job,
                     const std::vector<format::ChunkId>& ids,
                     absl::Time deadline);

  // As WaitWritten, for every chunk of `job` held now or later.
  Status WaitJobWritten(const std::string& job, absl::Time deadline);

  // Ends NextToWrite() waits.
  void Stop();

  Stats stats() const;

 private:
  struct Entry {
    Record rec;
    bool on_disk = false;
    bool writing = false;
    absl::Time held_at;
    absl::Time not_before;  // after a failed write: when to try again
    std::list<std::string>::iterator lru;  // in lru_ while on_disk
  };
  static std::string Key(const std::string& job, const format::ChunkId& id);
  // Drops on-disk entries, least recently used first, until `need` more
  // bytes fit; false when they cannot.
  bool MakeRoom(uint64_t need) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(std::map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkOnDisk(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Back to memory-only and the write queue.
  void MarkMemoryOnly(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  // Signalled on every change a waiter may be waiting for.
  absl::CondVar cv_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // The chunks on disk (evictable), most recently written or read first.
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);
  // Memory-only keys in the order to write them.
  std::list<std::string> queue_ ABSL_GUARDED_BY(mu_);
  Status last_write_error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration write_delay_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_MEMORY_TIER_H_
