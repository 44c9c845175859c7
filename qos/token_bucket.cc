#include "qos/token_bucket.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace stagger::qos {
namespace {

// A single booking never moves the TAT further than this (about 31 years),
// so that now + cost never overflows.
constexpr int64_t kMaxCostNs = int64_t{1} << 60;

// "STGRTB01": stagger token bucket, layout version 1.
constexpr uint64_t kMagic = 0x3130425452475453ull;

// Layout of the shared file. The TAT has its own cache line.
struct SharedLayout {
  std::atomic<uint64_t> magic;
  char pad[56];
  std::atomic<int64_t> tat;
  char pad2[56];
};
static_assert(sizeof(SharedLayout) == 128);
static_assert(std::atomic<int64_t>::is_always_lock_free &&
                  std::atomic<uint64_t>::is_always_lock_free,
              "the shared bucket needs address-free lock-free 64-bit atomics");

bool ValidNodeName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status ErrnoStatus(int err, std::string_view what, std::string_view path) {
  std::string msg = absl::StrCat("token bucket ", AsAbsl(path), ": ",
                                 AsAbsl(what), ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  return absl::FailedPreconditionError(msg);
}

}  // namespace

TokenBucket::TokenBucket(double rate_Bps, uint64_t burst_bytes)
    : TokenBucket(rate_Bps, burst_bytes, nullptr) {}

TokenBucket::TokenBucket(double rate_Bps, uint64_t burst_bytes,
                         std::atomic<int64_t>* tat)
    : tat_(tat != nullptr ? tat : &own_tat_) {
  if (std::isfinite(rate_Bps) && rate_Bps > 0) {
    rate_Bps_ = rate_Bps;
    burst_bytes_ = burst_bytes;
    ns_per_byte_ = 1e9 / rate_Bps;
    tolerance_ns_ = CostNs(burst_bytes);
  }
}

int64_t TokenBucket::CostNs(uint64_t bytes) const {
  double ns = std::ceil(static_cast<double>(bytes) * ns_per_byte_);
  if (!(ns < static_cast<double>(kMaxCostNs))) return kMaxCostNs;
  return static_cast<int64_t>(ns);
}

int64_t TokenBucket::SendAt(int64_t now_ns, int64_t tat, int64_t cost_ns,
                            int64_t* new_tat) const {
  *new_tat = std::max(tat, now_ns) + cost_ns;
  return std::max(now_ns, *new_tat - tolerance_ns_);
}

int64_t TokenBucket::Reserve(int64_t now_ns, uint64_t bytes) {
  if (unlimited()) return now_ns;
  const int64_t cost = CostNs(bytes);
  int64_t tat = tat_->load(std::memory_order_relaxed);
  int64_t new_tat;
  int64_t send_at;
  do {
    send_at = SendAt(now_ns, tat, cost, &new_tat);
  } while (
      !tat_->compare_exchange_weak(tat, new_tat, std::memory_order_relaxed));
  return send_at;
}

int64_t TokenBucket::Peek(int64_t now_ns, uint64_t bytes) const {
  if (unlimited()) return now_ns;
  int64_t new_tat;
  return SendAt(now_ns, tat_->load(std::memory_order_relaxed), CostNs(bytes),
                &new_tat);
}

int64_t TokenBucket::theoretical_arrival_ns() const {
  return tat_->load(std::memory_order_relaxed);
}

Result<std::string> SharedTokenBucket::NodePath(std::string_view node_name) {
  if (!ValidNodeName(node_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token bucket: bad node name \"", AsAbsl(node_name),
                     "\" (want [A-Za-z0-9._-]{1,128})"));
  }
  return absl::StrCat("/dev/shm/stagger-node-", AsAbsl(node_name));
}

Result<std::unique_ptr<SharedTokenBucket>> SharedTokenBucket::Open(
    std::string_view path, double rate_Bps, uint64_t burst_bytes) {
  if (path.empty()) {
    return absl::InvalidArgumentError("token bucket: empty path");
  }
  std::string p(path);
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, "open", p);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "fstat", p);
  }
  const size_t size = sizeof(SharedLayout);
  // Racing openers both extend the file with zeros: harmless, zero is a
  // valid idle state.
  if (static_cast<size_t>(st.st_size) < size &&
      ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "ftruncate", p);
  }
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int map_err = errno;
  ::close(fd);  // The mapping keeps the file.
  if (map == MAP_FAILED) return ErrnoStatus(map_err, "mmap", p);

  auto* layout = static_cast<SharedLayout*>(map);
  uint64_t magic = 0;
  if (!layout->magic.compare_exchange_strong(magic, kMagic) &&
      magic != kMagic) {
    ::munmap(map, size);
    return absl::FailedPreconditionError(absl::StrCat(
        "token bucket ", p, ": not a stagger token bucket file (magic ",
        absl::Hex(magic), ")"));
  }
  return std::unique_ptr<SharedTokenBucket>(new SharedTokenBucket(
      std::move(p), map, size, rate_Bps, burst_bytes, &layout->tat));
}

SharedTokenBucket::SharedTokenBucket(std::string path, void* map,
                                     size_t map_size, double rate_Bps,
                                     uint64_t burst_bytes,
                                     std::atomic<int64_t>* tat)
    : TokenBucket(rate_Bps, burst_bytes, tat),
      path_(std::move(path)),
      map_(map),
      map_size_(map_size) {}

SharedTokenBucket::~SharedTokenBucket() { ::munmap(map_, map_size_); }

}  // namespace stagger::qos
