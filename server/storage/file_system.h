// FileSystem: the seam under the server's storage writer, in the spirit of
// LevelDB's Env and RocksDB's FileSystem. Every byte the segment store moves
// goes through it, so tests can swap in a fault-injecting implementation
// (fault_injection_file_system.h) without touching a real disk's failure
// modes.
//
// Implementations: UringFileSystem (io_uring, uring_file_system.h),
// PosixFileSystem (pwrite/pread/fdatasync, posix_file_system.h) and
// FaultInjectionFileSystem (a wrapper). NewDefaultFileSystem() picks
// io_uring and falls back to POSIX where the kernel refuses io_uring.
//
// Errors: ENOSPC/EDQUOT map to RESOURCE_EXHAUSTED, ENOENT to NOT_FOUND, and
// every message names the operation, the path and the errno text.
//
// Thread-safety: a FileSystem is thread-safe. A File may be used from several
// threads, but a batch call (WriteAt/ReadAt) owns its buffers until it
// returns; callers must not write to overlapping ranges concurrently.
#ifndef STAGGER_SERVER_STORAGE_FILE_SYSTEM_H_
#define STAGGER_SERVER_STORAGE_FILE_SYSTEM_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "stagger/status.h"

namespace stagger::server {

// Every I/O call carries its priority so background work (compaction,
// scrubbing) can yield to checkpoint and restore traffic.
enum class IOPriority { kHigh, kLow };

struct IOOptions {
  IOPriority priority = IOPriority::kHigh;
  // SegmentStore::Read: check the payload's CRC-32C. A reader that hashes
  // the payload against the chunk id anyway (a raw chunk) may skip it.
  bool check_payload = true;
};

// One positional write: `len` bytes from `data` at file offset `offset`.
struct WriteRequest {
  uint64_t offset = 0;
  const char* data = nullptr;
  size_t len = 0;
};

// One positional read into `data`. `bytes_read` is set by ReadAt: equal to
// `len` unless the file ends first.
struct ReadRequest {
  uint64_t offset = 0;
  char* data = nullptr;
  size_t len = 0;
  size_t bytes_read = 0;
};

struct FileOptions {
  bool create = false;     // create the file if missing (mode 0644)
  bool writable = false;   // open read-write instead of read-only
  bool exclusive = false;  // with create: fail (EEXIST) if the file exists
  // Ask for O_DIRECT. Where the filesystem refuses it (EINVAL), the file is
  // opened buffered and File::direct_io() says false. With O_DIRECT, buffers,
  // offsets and lengths must be 4 KiB aligned.
  bool direct = false;
};

// An open file. Closing happens in the destructor.
class File {
 public:
  virtual ~File() = default;

  // Writes every request, several in flight at once; short writes are
  // continued. Returns OK when all bytes are written, otherwise the first
  // error (every request has finished or failed by the time it returns, so
  // the buffers are free again).
  virtual Status WriteAt(absl::Span<const WriteRequest> writes,
                         const IOOptions& io = {}) = 0;

  // Reads every request, several in flight at once; short reads are
  // continued until end of file. OK with bytes_read < len at end of file.
  virtual Status ReadAt(absl::Span<ReadRequest> reads,
                        const IOOptions& io = {}) = 0;

  // fdatasync: makes every write that completed before the call durable.
  virtual Status Sync(const IOOptions& io = {}) = 0;

  // Current size in bytes.
  virtual Result<uint64_t> Size() = 0;

  // Reserves disk blocks for [offset, offset + len) and extends the size to
  // cover them (fallocate mode 0); bytes never written read as zeros.
  // Writes into reserved blocks below the size are overwrites, which the
  // kernel runs in parallel (O_DIRECT writes that extend a file are
  // serialized on the inode). True when reserved; false where the
  // filesystem has no way to reserve (nothing changed); RESOURCE_EXHAUSTED
  // when the disk lacks the space.
  virtual Result<bool> Allocate(uint64_t offset, uint64_t len) { return false; }

  // True when the file was opened with O_DIRECT.
  virtual bool direct_io() const = 0;
  virtual const std::string& path() const = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Opens `path`. NOT_FOUND when it is missing and !options.create.
  virtual Result<std::unique_ptr<File>> Open(const std::string& path,
                                             const FileOptions& options) = 0;

  // mkdir -p. OK when the directory already exists.
  virtual Status CreateDirs(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, without "." and "..".
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // Removes a file or an empty directory.
  virtual Status Remove(const std::string& path) = 0;
  // rename(2): `to` is replaced atomically when it exists. Durable once the
  // directory is synced (SyncDir).
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Result<bool> Exists(const std::string& path) = 0;
  virtual Result<bool> IsDirectory(const std::string& path) = 0;
  // Cuts or extends a file to `size` bytes.
  virtual Status Truncate(const std::string& path, uint64_t size) = 0;
  // fsyncs a directory so that entries created in it are durable.
  virtual Status SyncDir(const std::string& path) = 0;

  // Registers `buffers` with the calling thread's I/O context (io_uring
  // fixed buffers), replacing any earlier set of that thread. Writes and
  // reads whose bytes lie inside a registered buffer then skip the per-call
  // page pinning. The caller keeps the memory alive until
  // UnregisterBuffers() on the same thread or the thread's exit.
  // Returns UNIMPLEMENTED where the implementation has no such notion and an
  // error when the kernel refuses (e.g. RLIMIT_MEMLOCK); I/O from those
  // buffers works either way, only slower.
  virtual Status RegisterBuffers(absl::Span<const iovec> buffers) {
    return absl::UnimplementedError("buffer registration not supported");
  }
  virtual void UnregisterBuffers() {}

  // Requests submitted to the kernel and not completed, all threads (the
  // io_uring queue depth in use); 0 where requests are synchronous.
  virtual uint64_t RequestsInFlight() const { return 0; }

  // A short name for logs: "io_uring", "posix", "fault_injection(io_uring)".
  virtual std::string Name() const = 0;
};

// io_uring (rings of `queue_depth` entries) when the kernel allows it
// (probed by creating a ring), POSIX otherwise, saying so on stderr.
// INVALID_ARGUMENT for a queue depth of 0.
Result<std::unique_ptr<FileSystem>> NewDefaultFileSystem(
    unsigned queue_depth = 32);

// "<dir>/<name>", without doubling a trailing slash.
std::string JoinPath(const std::string& dir, const std::string& name);

// Maps an errno from `op` on `path` to a Status: ENOSPC/EDQUOT →
// RESOURCE_EXHAUSTED, ENOENT → NOT_FOUND, EACCES/EPERM → PERMISSION_DENIED,
// anything else → INTERNAL. The message names op, path and errno text.
Status IoError(const std::string& op, const std::string& path, int err);

}  // namespace stagger::server

#endif  // STAGGER_SERVER_STORAGE_FILE_SYSTEM_H_
