#include "server/storage/uring_file_system.h"

#include <liburing.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/storage/internal/fd_file.h"
#include "util/log.h"

namespace stagger::storage_internal {

// The kernel's I/O priority encoding (include/uapi/linux/ioprio.h):
// class in the top 3 of 16 bits, level in the low ones. Written out here
// because that header is not C++ in every linux-libc-dev (6.1.192 names a
// parameter `class`).
constexpr uint16_t kIoprioClassShift = 13;
constexpr uint16_t kIoprioClassBestEffort = 2;
constexpr uint16_t IoPriority(uint16_t io_class, uint16_t level) {
  return static_cast<uint16_t>(io_class << kIoprioClassShift) | level;
}

struct Ring {
  io_uring ring;
  std::vector<iovec> registered;
  // Set when io_uring_enter failed in a way that leaves the ring's state
  // unknown; the ring is replaced on the next call.
  bool broken = false;
  bool initialized = false;
  ~Ring() {
    if (initialized) io_uring_queue_exit(&ring);
  }

  // Index of the registered buffer holding [p, p+n), or -1.
  int FixedIndex(const char* p, size_t n) const {
    for (size_t i = 0; i < registered.size(); ++i) {
      const char* base = static_cast<const char*>(registered[i].iov_base);
      if (p >= base && p + n <= base + registered[i].iov_len) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }
};

}  // namespace stagger::storage_internal

namespace stagger::server {
namespace {

using storage_internal::Ring;

std::atomic<uint64_t> g_next_fs_id{1};

// Rings of the calling thread, keyed by UringFileSystem id. A null entry
// records that creating the ring failed, so it is not retried per call.
thread_local std::unordered_map<uint64_t, std::unique_ptr<Ring>> t_rings;

std::string MemlockText() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return "unknown";
  if (rl.rlim_cur == RLIM_INFINITY) return "unlimited";
  return absl::StrCat(rl.rlim_cur, " bytes");
}

// One transfer in a batch, continued after short completions.
struct Op {
  char* data;
  uint64_t offset;
  size_t len;
  size_t done = 0;
};

class UringFile final : public storage_internal::FdFile {
 public:
  UringFile(UringFileSystem* fs, int fd, std::string path, bool direct)
      : FdFile(fd, std::move(path), direct), fs_(fs) {}

  Status WriteAt(absl::Span<const WriteRequest> writes,
                 const IOOptions& io) override {
    Ring* ring = fs_->ThreadRing();
    if (ring == nullptr) {
      for (const WriteRequest& w : writes) {
        fs_->CountRequest(false, true);
        STAGGER_RETURN_IF_ERROR(storage_internal::PwriteAll(fd(), path(), w));
      }
      return absl::OkStatus();
    }
    std::vector<Op> ops;
    ops.reserve(writes.size());
    for (const WriteRequest& w : writes) {
      ops.push_back(Op{const_cast<char*>(w.data), w.offset, w.len});
    }
    return Run(ring, /*write=*/true, ops, io);
  }

  Status ReadAt(absl::Span<ReadRequest> reads, const IOOptions& io) override {
    Ring* ring = fs_->ThreadRing();
    if (ring == nullptr) {
      for (ReadRequest& r : reads) {
        fs_->CountRequest(false, true);
        STAGGER_RETURN_IF_ERROR(storage_internal::PreadAll(fd(), path(), r));
      }
      return absl::OkStatus();
    }
    std::vector<Op> ops;
    ops.reserve(reads.size());
    for (const ReadRequest& r : reads) {
      ops.push_back(Op{r.data, r.offset, r.len});
    }
    Status s = Run(ring, /*write=*/false, ops, io);
    for (size_t i = 0; i < reads.size(); ++i) reads[i].bytes_read = ops[i].done;
    return s;
  }

  Status Sync(const IOOptions&) override {
    Ring* ring = fs_->ThreadRing();
    fs_->CountSync();
    if (ring == nullptr) return storage_internal::Fdatasync(fd(), path());
    io_uring_sqe* sqe = io_uring_get_sqe(&ring->ring);
    if (sqe == nullptr) return storage_internal::Fdatasync(fd(), path());
    io_uring_prep_fsync(sqe, fd(), IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data(sqe, nullptr);
    int ret;
    do {
      ret = io_uring_submit_and_wait(&ring->ring, 1);
    } while (ret == -EINTR);
    if (ret < 0) {
      ring->broken = true;
      return IoError("io_uring_enter(fsync)", path(), -ret);
    }
    io_uring_cqe* cqe = nullptr;
    do {
      ret = io_uring_wait_cqe(&ring->ring, &cqe);
    } while (ret == -EINTR);
    if (ret < 0) {
      ring->broken = true;
      return IoError("io_uring_wait_cqe(fsync)", path(), -ret);
    }
    int res = cqe->res;
    io_uring_cqe_seen(&ring->ring, cqe);
    if (res < 0) return IoError("fdatasync", path(), -res);
    return absl::OkStatus();
  }

 private:
  // Keeps up to queue_depth requests in flight until every op is done, has
  // hit end of file (reads) or the first error. Never returns while a
  // request is in flight, so the caller's buffers are free afterwards.
  Status Run(Ring* ring, bool write, std::vector<Op>& ops,
             const IOOptions& io) {
    const char* what = write ? "write" : "read";
    std::deque<size_t> waiting;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].len > 0) waiting.push_back(i);
    }
    const unsigned depth = fs_->queue_depth();
    const uint16_t prio = io.priority == IOPriority::kLow
                              ? storage_internal::IoPriority(
                                    storage_internal::kIoprioClassBestEffort, 7)
                              : 0;
    unsigned inflight = 0;
    // Whatever is still counted when this returns (a retired ring) leaves
    // the gauge with it.
    struct Uncount {
      UringFileSystem* fs;
      unsigned* n;
      ~Uncount() { fs->AddInFlight(-static_cast<int64_t>(*n)); }
    } uncount{fs_, &inflight};
    Status first_error;
    while (true) {
      while (
          first_error.ok() && !waiting.empty() && inflight < depth &&
          Prepare(ring, write, ops[waiting.front()], waiting.front(), prio)) {
        waiting.pop_front();
        ++inflight;
        fs_->AddInFlight(1);
      }
      if (inflight == 0) {
        if (first_error.ok() && !waiting.empty()) {
          // No entry free with nothing in flight: a previous call left the
          // ring in an unknown state.
          ring->broken = true;
          first_error = absl::InternalError(
              absl::StrCat(what, " ", path(), ": io_uring queue unusable"));
        }
        break;
      }
      int ret = io_uring_submit_and_wait(&ring->ring, 1);
      if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
        // The kernel's view of the queue is unknown; retire the ring.
        ring->broken = true;
        return IoError(absl::StrCat("io_uring_enter(", what, ")"), path(),
                       -ret);
      }
      io_uring_cqe* cqe;
      while (io_uring_peek_cqe(&ring->ring, &cqe) == 0) {
        const size_t i = static_cast<size_t>(cqe->user_data);
        const int res = cqe->res;
        io_uring_cqe_seen(&ring->ring, cqe);
        --inflight;
        fs_->AddInFlight(-1);
        Reap(write, res, ops[i], i, &waiting, &first_error);
      }
    }
    return first_error;
  }

  // Queues the rest of `op` (ops[i]) on a free submission entry; false
  // when none is free.
  bool Prepare(Ring* ring, bool write, const Op& op, size_t i, uint16_t prio) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring->ring);
    if (sqe == nullptr) return false;
    char* p = op.data + op.done;
    size_t n = op.len - op.done;
    uint64_t off = op.offset + op.done;
    int idx = ring->FixedIndex(p, n);
    if (write) {
      if (idx >= 0) {
        io_uring_prep_write_fixed(sqe, fd(), p, n, off, idx);
      } else {
        io_uring_prep_write(sqe, fd(), p, n, off);
      }
    } else {
      if (idx >= 0) {
        io_uring_prep_read_fixed(sqe, fd(), p, n, off, idx);
      } else {
        io_uring_prep_read(sqe, fd(), p, n, off);
      }
    }
    sqe->ioprio = prio;
    sqe->user_data = i;
    fs_->CountRequest(idx >= 0, false);
    return true;
  }

  // Books a completion of `res` for `op` (ops[i]): done, queued again for
  // the rest (short or interrupted), or the first error.
  void Reap(bool write, int res, Op& op, size_t i, std::deque<size_t>* waiting,
            Status* first_error) {
    const char* what = write ? "write" : "read";
    if (res == -EINTR || res == -EAGAIN) {
      waiting->push_back(i);
    } else if (res < 0) {
      if (first_error->ok()) *first_error = IoError(what, path(), -res);
    } else if (res == 0) {
      // Reads: end of file. Writes: no progress, which would loop.
      if (write && first_error->ok()) {
        *first_error = IoError("write (no progress)", path(), EIO);
      }
    } else {
      op.done += static_cast<size_t>(res);
      if (op.done < op.len) waiting->push_back(i);
    }
  }

  UringFileSystem* fs_;
};

}  // namespace

UringFileSystem::UringFileSystem(unsigned queue_depth)
    : id_(g_next_fs_id.fetch_add(1)), queue_depth_(queue_depth) {}

UringFileSystem::~UringFileSystem() { t_rings.erase(id_); }

Result<std::unique_ptr<UringFileSystem>> UringFileSystem::Create(
    const UringFileSystemOptions& options) {
  if (options.queue_depth == 0) {
    return absl::InvalidArgumentError("io_uring queue depth must be > 0");
  }
  io_uring probe;
  int ret = io_uring_queue_init(options.queue_depth, &probe, 0);
  if (ret < 0) {
    return absl::UnavailableError(absl::StrCat(
        "io_uring_queue_init: ", std::strerror(-ret), " (errno ", -ret, ")"));
  }
  io_uring_queue_exit(&probe);
  return std::unique_ptr<UringFileSystem>(
      new UringFileSystem(options.queue_depth));
}

Ring* UringFileSystem::ThreadRing() {
  auto it = t_rings.find(id_);
  if (it != t_rings.end()) {
    if (it->second == nullptr || !it->second->broken) return it->second.get();
    t_rings.erase(it);
  }
  auto ring = std::make_unique<Ring>();
  int ret = io_uring_queue_init(queue_depth_, &ring->ring, 0);
  if (ret < 0) {
    if (!logged_ring_failure_.exchange(true)) {
      log::Warning("stagger storage",
                   absl::StrCat("io_uring_queue_init failed on a thread (",
                                std::strerror(-ret),
                                "); that thread uses pread/pwrite"));
    }
    t_rings[id_] = nullptr;
    return nullptr;
  }
  ring->initialized = true;
  Ring* r = ring.get();
  t_rings[id_] = std::move(ring);
  return r;
}

void UringFileSystem::CountRequest(bool fixed, bool posix) {
  auto& c = posix ? posix_requests_ : fixed ? fixed_requests_ : plain_requests_;
  c.fetch_add(1, std::memory_order_relaxed);
}

UringFileSystem::Stats UringFileSystem::stats() const {
  Stats s;
  s.fixed_requests = fixed_requests_.load(std::memory_order_relaxed);
  s.plain_requests = plain_requests_.load(std::memory_order_relaxed);
  s.posix_requests = posix_requests_.load(std::memory_order_relaxed);
  s.syncs = syncs_.load(std::memory_order_relaxed);
  return s;
}

Result<std::unique_ptr<File>> UringFileSystem::Open(
    const std::string& path, const FileOptions& options) {
  bool direct = false;
  STAGGER_ASSIGN_OR_RETURN(int fd,
                           storage_internal::OpenFd(path, options, &direct));
  return std::unique_ptr<File>(
      std::make_unique<UringFile>(this, fd, path, direct));
}

Status UringFileSystem::RegisterBuffers(absl::Span<const iovec> buffers) {
  Ring* ring = ThreadRing();
  if (ring == nullptr) {
    return absl::FailedPreconditionError(
        "register buffers: this thread has no io_uring");
  }
  UnregisterBuffers();
  if (buffers.empty()) return absl::OkStatus();
  int ret = io_uring_register_buffers(&ring->ring, buffers.data(),
                                      static_cast<unsigned>(buffers.size()));
  if (ret < 0) {
    if (!logged_register_failure_.exchange(true)) {
      log::Warning(
          "stagger storage",
          absl::StrCat("io_uring_register_buffers failed (",
                       std::strerror(-ret), "; RLIMIT_MEMLOCK ", MemlockText(),
                       "); writing from unregistered buffers"));
    }
    return IoError("io_uring_register_buffers",
                   absl::StrCat("(", buffers.size(), " buffers)"), -ret);
  }
  ring->registered.assign(buffers.begin(), buffers.end());
  return absl::OkStatus();
}

void UringFileSystem::UnregisterBuffers() {
  auto it = t_rings.find(id_);
  if (it == t_rings.end() || it->second == nullptr) return;
  Ring* ring = it->second.get();
  if (ring->registered.empty()) return;
  io_uring_unregister_buffers(&ring->ring);
  ring->registered.clear();
}

}  // namespace stagger::server
