// UringFileSystem: file I/O through io_uring (liburing 2.3).
//
// Each thread that does I/O through a UringFileSystem gets its own ring
// (thread_local, created on first use, `queue_depth` entries, no SQPOLL:
// it loses on few cores). A batch call puts up to `queue_depth` requests in
// flight and waits for all of them; completions arrive in any order, so
// Sync() is only issued after the writes it covers have completed (WriteAt
// returns only then).
//
// RegisterBuffers() registers the calling thread's staging buffers with its
// ring; requests whose bytes lie inside one are issued as
// write_fixed/read_fixed. When the kernel refuses the registration (commonly
// RLIMIT_MEMLOCK), one line goes to stderr and I/O continues with plain
// writes. A thread whose ring cannot be created falls back to pwrite/pread.
//
// Directory operations are PosixFileSystem's.
//
// Thread-safety: thread-safe. Files must not outlive their UringFileSystem.
// Rings of threads other than the destroying one are closed when those
// threads exit.
#ifndef STAGGER_SERVER_STORAGE_URING_FILE_SYSTEM_H_
#define STAGGER_SERVER_STORAGE_URING_FILE_SYSTEM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "server/storage/posix_file_system.h"

namespace stagger::storage_internal {
struct Ring;
}  // namespace stagger::storage_internal

namespace stagger::server {

struct UringFileSystemOptions {
  unsigned queue_depth = 32;  // entries per thread's ring = requests in flight
};

class UringFileSystem : public PosixFileSystem {
 public:
  // Probes io_uring by creating the calling thread's ring. UNAVAILABLE
  // (naming the errno) when the kernel refuses, e.g. io_uring disabled by
  // sysctl or seccomp; INVALID_ARGUMENT for a queue depth of 0.
  static Result<std::unique_ptr<UringFileSystem>> Create(
      const UringFileSystemOptions& options);
  ~UringFileSystem() override;

  Result<std::unique_ptr<File>> Open(const std::string& path,
                                     const FileOptions& options) override;
  Status RegisterBuffers(absl::Span<const iovec> buffers) override;
  void UnregisterBuffers() override;
  std::string Name() const override { return "io_uring"; }

  // Requests issued, by kind, since creation (all threads).
  struct Stats {
    uint64_t fixed_requests = 0;  // read_fixed / write_fixed
    uint64_t plain_requests = 0;  // read / write through the ring
    uint64_t posix_requests = 0;  // pread / pwrite on a thread without a ring
    uint64_t syncs = 0;
  };
  Stats stats() const;

  // The calling thread's ring, created on first use; nullptr when it could
  // not be created (the caller then uses POSIX calls). Internal.
  storage_internal::Ring* ThreadRing();
  unsigned queue_depth() const { return queue_depth_; }
  void CountRequest(bool fixed, bool posix);
  void CountSync() { syncs_.fetch_add(1, std::memory_order_relaxed); }
  void AddInFlight(int64_t n) {
    in_flight_.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t RequestsInFlight() const override {
    const int64_t n = in_flight_.load(std::memory_order_relaxed);
    return n > 0 ? static_cast<uint64_t>(n) : 0;
  }

 private:
  explicit UringFileSystem(unsigned queue_depth);

  const uint64_t id_;  // key of this instance's rings in the thread_local map
  const unsigned queue_depth_;
  std::atomic<bool> logged_ring_failure_{false};
  std::atomic<bool> logged_register_failure_{false};
  std::atomic<uint64_t> fixed_requests_{0};
  std::atomic<uint64_t> plain_requests_{0};
  std::atomic<uint64_t> posix_requests_{0};
  std::atomic<uint64_t> syncs_{0};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_STORAGE_URING_FILE_SYSTEM_H_
