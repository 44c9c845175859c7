#include "bench/ceilings.h"

#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "transport/buffer.h"
#include "transport/ucx_transport.h"

namespace stagger::bench {
namespace {

using transport::Buffer;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

// Fills `b` with cheap pseudo-random bytes, so no layer below can shortcut
// zeros.
void Scribble(Buffer& b, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i + 8 <= b.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(b.data() + i, &x, 8);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// One pass: writes (or reads, `write` false) `total` bytes through `ring`
// at `fd`, sequentially. A slot is one buffer; a short transfer is
// resubmitted for its remainder.
Status TransferAll(io_uring* ring, int fd, std::vector<Buffer>& bufs,
                   uint64_t total, uint64_t block, bool write) {
  struct Slot {
    uint64_t offset = 0;
    uint64_t done = 0;
    uint64_t len = 0;
  };
  std::vector<Slot> slots(bufs.size());
  uint64_t next = 0;
  unsigned inflight = 0;
  auto submit = [&](size_t i) {
    Slot& s = slots[i];
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    if (write) {
      io_uring_prep_write(sqe, fd, bufs[i].data() + s.done,
                          static_cast<unsigned>(s.len - s.done),
                          s.offset + s.done);
    } else {
      io_uring_prep_read(sqe, fd, bufs[i].data() + s.done,
                         static_cast<unsigned>(s.len - s.done),
                         s.offset + s.done);
    }
    io_uring_sqe_set_data64(sqe, i);
  };
  for (size_t i = 0; i < slots.size() && next < total; ++i, next += block) {
    slots[i] = {next, 0, std::min(block, total - next)};
    submit(i);
    ++inflight;
  }
  while (inflight > 0) {
    io_uring_submit(ring);
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(ring, &cqe);
    if (rc < 0) return absl::UnavailableError(strerror(-rc));
    size_t i = io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    if (res <= 0) {
      return Status(res == -EINVAL ? absl::StatusCode::kInvalidArgument
                                   : absl::StatusCode::kUnavailable,
                    absl::StrCat(write ? "write: " : "read: ",
                                 strerror(res == 0 ? EIO : -res)));
    }
    Slot& s = slots[i];
    s.done += static_cast<uint64_t>(res);
    if (s.done < s.len) {
      submit(i);
    } else if (next < total) {
      s = {next, 0, std::min(block, total - next)};
      next += block;
      submit(i);
    } else {
      --inflight;
    }
  }
  return absl::OkStatus();
}

Result<DiskWriteResult> WriteOnce(const std::string& path, uint64_t total,
                                  uint64_t block, unsigned depth, bool direct) {
  Fd f;
  f.fd = open(
      path.c_str(),
      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (f.fd < 0) {
    return Status(errno == EINVAL ? absl::StatusCode::kInvalidArgument
                                  : absl::StatusCode::kUnavailable,
                  absl::StrCat("open ", path, ": ", strerror(errno)));
  }
  // Space first, untimed, as fio lays out its files and stagger-server
  // reserves ahead of its records: O_DIRECT writes that extend a file are
  // serialized by ext4 (and others), which would measure that lock, not
  // the disk.
  bool preallocated = fallocate(f.fd, 0, 0, static_cast<off_t>(total)) == 0;
  if (!preallocated && errno != EOPNOTSUPP && errno != ENOSYS) {
    return Status(errno == ENOSPC ? absl::StatusCode::kResourceExhausted
                                  : absl::StatusCode::kUnavailable,
                  absl::StrCat("fallocate ", total, " bytes for ", path, ": ",
                               strerror(errno)));
  }
  std::vector<Buffer> bufs;
  for (unsigned i = 0; i < depth; ++i) {
    bufs.emplace_back(block);
    Scribble(bufs.back(), i);
  }
  io_uring ring;
  int rc = io_uring_queue_init(depth * 2, &ring, 0);
  if (rc < 0) {
    return absl::UnavailableError(
        absl::StrCat("io_uring_queue_init: ", strerror(-rc)));
  }
  auto start = std::chrono::steady_clock::now();
  Status s = TransferAll(&ring, f.fd, bufs, total, block, /*write=*/true);
  io_uring_queue_exit(&ring);
  if (s.ok() && fdatasync(f.fd) != 0) {
    s = absl::UnavailableError(absl::StrCat("fdatasync: ", strerror(errno)));
  }
  DiskWriteResult r;
  r.seconds = Since(start);
  r.bytes = total;
  r.direct = direct;
  r.preallocated = preallocated;
  if (!s.ok()) return WithContext(s, path);
  return r;
}

// Drops the cached pages of `path` (written and synced already), so a
// buffered read goes to the disk.
void DropCache(const std::string& path) {
  Fd f;
  f.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd >= 0) posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
}

Result<DiskReadResult> ReadOnce(const std::string& path, uint64_t total,
                                uint64_t block, unsigned depth, bool direct) {
  if (!direct) DropCache(path);
  Fd f;
  f.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (f.fd < 0) {
    return Status(errno == EINVAL ? absl::StatusCode::kInvalidArgument
                                  : absl::StatusCode::kUnavailable,
                  absl::StrCat("open ", path, ": ", strerror(errno)));
  }
  std::vector<Buffer> bufs;
  for (unsigned i = 0; i < depth; ++i) bufs.emplace_back(block);
  io_uring ring;
  int rc = io_uring_queue_init(depth * 2, &ring, 0);
  if (rc < 0) {
    return absl::UnavailableError(
        absl::StrCat("io_uring_queue_init: ", strerror(-rc)));
  }
  auto start = std::chrono::steady_clock::now();
  Status s = TransferAll(&ring, f.fd, bufs, total, block, /*write=*/false);
  DiskReadResult r;
  r.seconds = Since(start);
  io_uring_queue_exit(&ring);
  r.bytes = total;
  r.direct = direct;
  if (!s.ok()) return WithContext(s, path);
  return r;
}

// Calls outstanding on the loopback connection, under a mutex.
struct Window {
  uint64_t outstanding = 0;
  uint64_t limit = 1;
  static bool HasRoom(Window* w) { return w->outstanding < w->limit; }
  static bool Drained(Window* w) { return w->outstanding == 0; }
};

class ReplyAtOnce : public transport::RequestHandler {
 public:
  void OnRequest(transport::Message request,
                 std::unique_ptr<transport::ReplyChannel> reply) override {
    reply->Send(request.op, std::string(), Buffer());
  }
};

}  // namespace

Result<DiskWriteResult> MeasureDiskWrite(const std::string& dir, uint64_t bytes,
                                         uint64_t block, unsigned queue_depth) {
  uint64_t total = (bytes + block - 1) / block * block;
  std::string path = dir + "/disk-ceiling.tmp";
  auto r = WriteOnce(path, total, block, queue_depth, /*direct=*/true);
  // EINVAL from open or the first write: the filesystem refuses O_DIRECT.
  if (!r.ok() && r.status().code() == absl::StatusCode::kInvalidArgument) {
    r = WriteOnce(path, total, block, queue_depth, /*direct=*/false);
  }
  unlink(path.c_str());
  return r;
}

Result<DiskReadResult> MeasureDiskRead(const std::string& dir, uint64_t bytes,
                                       uint64_t block, unsigned queue_depth) {
  uint64_t total = (bytes + block - 1) / block * block;
  std::string path = dir + "/disk-read-ceiling.tmp";
  auto w = WriteOnce(path, total, block, queue_depth, /*direct=*/true);
  if (!w.ok() && w.status().code() == absl::StatusCode::kInvalidArgument) {
    w = WriteOnce(path, total, block, queue_depth, /*direct=*/false);
  }
  if (!w.ok()) {
    unlink(path.c_str());
    return w.status();
  }
  auto r = ReadOnce(path, total, block, queue_depth, /*direct=*/true);
  // EINVAL from open or the first read: the filesystem refuses O_DIRECT.
  if (!r.ok() && r.status().code() == absl::StatusCode::kInvalidArgument) {
    r = ReadOnce(path, total, block, queue_depth, /*direct=*/false);
  }
  unlink(path.c_str());
  return r;
}

Result<LinkResult> MeasureUcxLoopback(uint64_t bytes, uint64_t message,
                                      unsigned inflight) {
  setenv("UCX_TLS", "sm,tcp", /*overwrite=*/0);
  auto t = transport::NewUcxTransport();
  if (!t.ok()) return WithContext(t.status(), "UCX transport");
  ReplyAtOnce handler;
  auto listener = (*t)->Listen("ucx:", &handler);
  if (!listener.ok()) return WithContext(listener.status(), "UCX listen");
  auto conn = (*t)->Connect((*listener)->address());
  if (!conn.ok()) return WithContext(conn.status(), "UCX connect");

  Buffer payload(message);
  Scribble(payload, 42);
  const std::string header = "bench";
  // Warm-up: endpoint and rendezvous set-up, receive buffers.
  for (int i = 0; i < 4; ++i) {
    auto r = (*conn)->CallSync(1, header, payload.view());
    if (!r.ok()) return WithContext(r.status(), "UCX loopback warm-up");
  }

  uint64_t calls = (bytes + message - 1) / message;
  absl::Mutex mu;
  Window w;
  w.limit = inflight > 0 ? inflight : 1;
  Status first_error;
  auto start = std::chrono::steady_clock::now();
  for (uint64_t issued = 0; issued < calls; ++issued) {
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&Window::HasRoom, &w));
      ++w.outstanding;
    }
    (*conn)->Call(1, header, payload.view(), [&](Result<transport::Message> r) {
      absl::MutexLock lock(&mu);
      --w.outstanding;
      if (!r.ok() && first_error.ok()) first_error = r.status();
    });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&Window::Drained, &w));
  }
  LinkResult result;
  result.seconds = Since(start);
  result.bytes = calls * message;
  conn->reset();
  listener->reset();
  if (!first_error.ok()) return WithContext(first_error, "UCX loopback");
  return result;
}

}  // namespace stagger::bench
