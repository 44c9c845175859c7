#include "client/cuda/cuda_snapshot.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/cuda/internal/chunk_hash.h"
#include "client/cuda/internal/cuda_util.h"
#include "client/cuda/internal/ring_allocator.h"

namespace stagger::client {
namespace {

using client_internal::CudaStatus;
using client_internal::EventPool;
using client_internal::RingAllocator;
using client_internal::ScopedDevice;
using client_internal::UniqueDeviceMemory;
using client_internal::UniqueEvent;
using client_internal::UniqueStream;

constexpr uint64_t kAutoRingCap = 4ull << 30;
// Events created up front: enough for the chunks of a typical staging pool
// in flight; the pool grows past it only when more are.
constexpr size_t kInitialEvents = 64;

// One Copy() on its way through the completion threads.
struct Pending {
  CopyCallback captured;
  CopyCallback on_host;
  Status status;                        // an error while enqueueing
  cudaEvent_t capture_event = nullptr;  // null when nothing was enqueued
  cudaEvent_t host_event = nullptr;     // ring copies only
  bool via_ring = false;                // holds the oldest live ring space
};

class CudaSnapshotSourceImpl final : public CudaSnapshotSource {
 public:
  explicit CudaSnapshotSourceImpl(int device) : device_(device) {}
  ~CudaSnapshotSourceImpl() override;

  Status Init(const CudaSnapshotOptions& options);

  Status Fence(void* caller_stream) override;
  void Copy(char* dst, const char* src, size_t len, CopyCallback captured,
            CopyCallback on_host) override;
  Status RegisterStaging(void* base, size_t len) override;
  void UnregisterStaging(void* base) override;
  CudaSnapshotStats stats() const override;
  Status Fingerprint(const std::vector<std::pair<const char*, size_t>>& chunks,
                     std::vector<uint64_t>* out) override;

 private:
  Status EnqueueDirect(char* dst, const char* src, size_t len, Pending& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(enqueue_mu_);
  Status EnqueueViaRing(char* dst, const char* src, size_t len, uint64_t offset,
                        Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(enqueue_mu_);
  void PushCapture(Pending p);
  void CaptureLoop();
  void DrainLoop();
  bool CaptureReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return !capture_queue_.empty() || stopping_;
  }
  bool DrainReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return !drain_queue_.empty() || capture_done_;
  }
  Status Sync(cudaEvent_t event, const char* what);

  const int device_;
  UniqueStream copy_stream_;   // fence waits, direct D2H, ring D2D
  UniqueStream drain_stream_;  // ring D2H; only with a ring
  UniqueEvent fence_event_ ABSL_GUARDED_BY(enqueue_mu_);
  EventPool events_;
  UniqueDeviceMemory ring_memory_;
  uint64_t ring_bytes_ = 0;

  // Held while work is put on the streams and its Pending queued, so the
  // capture queue is in stream order. Order: enqueue_mu_, then ring_mu_ or
  // queue_mu_ (never both).
  absl::Mutex enqueue_mu_;
  absl::Mutex ring_mu_ ABSL_ACQUIRED_AFTER(enqueue_mu_);
  std::optional<RingAllocator> ring_ ABSL_GUARDED_BY(ring_mu_);

  absl::Mutex queue_mu_ ABSL_ACQUIRED_AFTER(enqueue_mu_);
  std::deque<Pending> capture_queue_ ABSL_GUARDED_BY(queue_mu_);
  std::deque<Pending> drain_queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool capture_done_ ABSL_GUARDED_BY(queue_mu_) = false;

  absl::Mutex staging_mu_;
  std::set<void*> registered_ ABSL_GUARDED_BY(staging_mu_);

  std::atomic<uint64_t> chunks_via_device_{0};
  std::atomic<uint64_t> chunks_direct_{0};
  std::atomic<uint64_t> bytes_via_device_{0};
  std::atomic<uint64_t> bytes_direct_{0};

  std::thread capture_thread_;
  std::thread drain_thread_;
};

Status CudaSnapshotSourceImpl::Init(const CudaSnapshotOptions& options) {
  ScopedDevice on(device_);
  STAGGER_RETURN_IF_ERROR(on.status());
  STAGGER_ASSIGN_OR_RETURN(copy_stream_,
                           client_internal::NewLowPriorityStream());
  {
    STAGGER_ASSIGN_OR_RETURN(
        UniqueEvent fence, client_internal::NewEvent(/*blocking_sync=*/false));
    absl::MutexLock l(&enqueue_mu_);
    fence_event_ = std::move(fence);
  }
  STAGGER_RETURN_IF_ERROR(events_.Reserve(kInitialEvents));

  if (options.device_snapshot) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    STAGGER_RETURN_IF_ERROR(
        CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes),
                   "reading free device memory"));
    uint64_t want = options.device_staging_bytes;
    if (want == 0) want = std::min<uint64_t>(free_bytes / 4, kAutoRingCap);
    want &= ~uint64_t{255};
    void* memory = nullptr;
    // Not enough room, or the allocation fails (another process took the
    // memory meanwhile): no ring, every chunk goes straight to host.
    if (want > 0 && want <= free_bytes &&
        CudaStatus(cudaMalloc(&memory, want), "").ok()) {
      ring_memory_.reset(memory);
      STAGGER_ASSIGN_OR_RETURN(drain_stream_,
                               client_internal::NewLowPriorityStream());
      ring_bytes_ = want;
      absl::MutexLock l(&ring_mu_);
      ring_.emplace(want);
    }
  }

  capture_thread_ = std::thread([this] { CaptureLoop(); });
  if (ring_bytes_ > 0) drain_thread_ = std::thread([this] { DrainLoop(); });
  return absl::OkStatus();
}

CudaSnapshotSourceImpl::~CudaSnapshotSourceImpl() {
  {
    absl::MutexLock l(&queue_mu_);
    stopping_ = true;
  }
  // Both loops finish what is queued before they exit.
  if (capture_thread_.joinable()) capture_thread_.join();
  if (drain_thread_.joinable()) drain_thread_.join();

  ScopedDevice on(device_);  // best effort: releases below ignore errors
  {
    absl::MutexLock l(&staging_mu_);
    for (void* base : registered_) (void)cudaHostUnregister(base);
    registered_.clear();
  }
  ring_memory_.reset();
  drain_stream_.reset();
  copy_stream_.reset();
  absl::MutexLock l(&enqueue_mu_);
  fence_event_.reset();
}

Status CudaSnapshotSourceImpl::Fence(void* caller_stream) {
  ScopedDevice on(device_);
  STAGGER_RETURN_IF_ERROR(on.status());
  // nullptr is the legacy default stream (what 0 means unless code is built
  // for per-thread default streams): name it explicitly.
  cudaStream_t stream = caller_stream != nullptr
                            ? static_cast<cudaStream_t>(caller_stream)
                            : cudaStreamLegacy;
  absl::MutexLock l(&enqueue_mu_);
  STAGGER_RETURN_IF_ERROR(
      CudaStatus(cudaEventRecord(fence_event_.get(), stream),
                 "recording the snapshot fence on the caller's stream"));
  // The wait takes the event's state now, so re-recording the one fence
  // event at the next Fence() cannot disturb it.
  return CudaStatus(
      cudaStreamWaitEvent(copy_stream_.get(), fence_event_.get(), 0),
      "ordering the snapshot stream after the fence");
}

Status CudaSnapshotSourceImpl::Fingerprint(
    const std::vector<std::pair<const char*, size_t>>& chunks,
    std::vector<uint64_t>* out) {
  out->assign(2 * chunks.size(), 0);
  if (chunks.empty()) return absl::OkStatus();
  ScopedDevice on(device_);
  STAGGER_RETURN_IF_ERROR(on.status());
  unsigned long long* results = nullptr;
  STAGGER_RETURN_IF_ERROR(
      CudaStatus(cudaMalloc(reinterpret_cast<void**>(&results),
                            2 * chunks.size() * sizeof(unsigned long long)),
                 "allocating fingerprint results"));
  Status s;
  {
    // On the snapshot stream, after the fence, in order with copies.
    absl::MutexLock l(&enqueue_mu_);
    s = CudaStatus(
        cudaMemsetAsync(results, 0, 2 * chunks.size() * sizeof(*results),
                        copy_stream_.get()),
        "clearing fingerprint results");
    // Consecutive chunks of one tensor (contiguous, equal size but the
    // last) go in one launch.
    for (size_t i = 0; i < chunks.size() && s.ok();) {
      size_t j = i + 1;
      const size_t size = chunks[i].second;
      while (j < chunks.size() &&
             chunks[j].first == chunks[j - 1].first + chunks[j - 1].second &&
             chunks[j - 1].second == size && chunks[j].second <= size) {
        ++j;
      }
      size_t total =
          static_cast<size_t>(chunks[j - 1].first - chunks[i].first) +
          chunks[j - 1].second;
      s = CudaStatus(client_internal::LaunchChunkHashes(
                         chunks[i].first, total, size > 0 ? size : 1,
                         results + 2 * i, copy_stream_.get()),
                     "launching the chunk fingerprint kernel");
      i = j;
    }
    if (s.ok()) {
      s = CudaStatus(
          cudaMemcpyAsync(out->data(), results, out->size() * sizeof(uint64_t),
                          cudaMemcpyDeviceToHost, copy_stream_.get()),
          "copying chunk fingerprints");
    }
  }
  // Our own stream only: never a device-wide sync.
  if (s.ok()) {
    s = CudaStatus(cudaStreamSynchronize(copy_stream_.get()),
                   "waiting for chunk fingerprints");
  }
  cudaFree(results);
  return s;
}

void CudaSnapshotSourceImpl::Copy(char* dst, const char* src, size_t len,
                                  CopyCallback captured, CopyCallback on_host) {
  Pending p;
  p.captured = std::move(captured);
  p.on_host = std::move(on_host);
  ScopedDevice on(device_);
  if (!on.status().ok()) {
    p.status = on.status();
    PushCapture(std::move(p));
    return;
  }
  absl::MutexLock l(&enqueue_mu_);
  if (len > 0) {
    std::optional<uint64_t> offset;
    if (ring_bytes_ > 0) {
      absl::MutexLock r(&ring_mu_);
      offset = ring_->Allocate(len);
    }
    p.status = offset ? EnqueueViaRing(dst, src, len, *offset, p)
                      : EnqueueDirect(dst, src, len, p);
  }
  PushCapture(std::move(p));
}

Status CudaSnapshotSourceImpl::EnqueueDirect(char* dst, const char* src,
                                             size_t len, Pending& p) {
  STAGGER_ASSIGN_OR_RETURN(cudaEvent_t event, events_.Acquire());
  Status s = CudaStatus(cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToHost,
                                        copy_stream_.get()),
                        absl::StrCat("copying ", len, " bytes from device ",
                                     device_, " to host staging"));
  if (s.ok()) {
    s = CudaStatus(cudaEventRecord(event, copy_stream_.get()),
                   "recording a snapshot copy's completion");
    // The copy may be queued and still write `dst`, which the caller
    // reuses once it hears of the failure: let it finish first.
    if (!s.ok()) (void)cudaStreamSynchronize(copy_stream_.get());
  }
  if (!s.ok()) {
    events_.Release(event);
    return s;
  }
  p.capture_event = event;
  chunks_direct_.fetch_add(1, std::memory_order_relaxed);
  bytes_direct_.fetch_add(len, std::memory_order_relaxed);
  return absl::OkStatus();
}

Status CudaSnapshotSourceImpl::EnqueueViaRing(char* dst, const char* src,
                                              size_t len, uint64_t offset,
                                              Pending& p) {
  // From here on `p` owns the ring space, whatever happens: the drain
  // thread frees it in allocation order.
  p.via_ring = true;
  char* slot = static_cast<char*>(ring_memory_.get()) + offset;
  STAGGER_ASSIGN_OR_RETURN(cudaEvent_t capture_event, events_.Acquire());
  Result<cudaEvent_t> host_event = events_.Acquire();
  if (!host_event.ok()) {
    events_.Release(capture_event);
    return host_event.status();
  }
  Status s =
      CudaStatus(cudaMemcpyAsync(slot, src, len, cudaMemcpyDeviceToDevice,
                                 copy_stream_.get()),
                 absl::StrCat("copying ", len, " bytes into the device ring"));
  if (s.ok()) {
    s = CudaStatus(cudaEventRecord(capture_event, copy_stream_.get()),
                   "recording a device snapshot copy's completion");
  }
  if (s.ok()) {
    s = CudaStatus(cudaStreamWaitEvent(drain_stream_.get(), capture_event, 0),
                   "ordering the drain stream after a device snapshot copy");
  }
  if (s.ok()) {
    s = CudaStatus(
        cudaMemcpyAsync(dst, slot, len, cudaMemcpyDeviceToHost,
                        drain_stream_.get()),
        absl::StrCat("draining ", len, " bytes from the device ring"));
  }
  if (s.ok()) {
    s = CudaStatus(cudaEventRecord(*host_event, drain_stream_.get()),
                   "recording a drain copy's completion");
  }
  if (!s.ok()) {
    // Part of the work may be queued and still touch the slot: let it
    // finish before the slot can be handed out again. Only our own streams
    // are waited for; their errors are the one reported.
    (void)cudaStreamSynchronize(copy_stream_.get());
    (void)cudaStreamSynchronize(drain_stream_.get());
    events_.Release(capture_event);
    events_.Release(*host_event);
    return s;
  }
  p.capture_event = capture_event;
  p.host_event = *host_event;
  chunks_via_device_.fetch_add(1, std::memory_order_relaxed);
  bytes_via_device_.fetch_add(len, std::memory_order_relaxed);
  return absl::OkStatus();
}

void CudaSnapshotSourceImpl::PushCapture(Pending p) {
  absl::MutexLock l(&queue_mu_);
  capture_queue_.push_back(std::move(p));
}

Status CudaSnapshotSourceImpl::Sync(cudaEvent_t event, const char* what) {
  // Never cudaDeviceSynchronize: that would wait for the training's work.
  return CudaStatus(cudaEventSynchronize(event), what);
}

void CudaSnapshotSourceImpl::CaptureLoop() {
  // Best effort; every CUDA call below reports its own error.
  (void)cudaSetDevice(device_);
  for (;;) {
    Pending p;
    {
      absl::MutexLock l(&queue_mu_);
      queue_mu_.Await(
          absl::Condition(this, &CudaSnapshotSourceImpl::CaptureReady));
      if (capture_queue_.empty()) {
        capture_done_ = true;
        return;
      }
      p = std::move(capture_queue_.front());
      capture_queue_.pop_front();
    }
    Status s = p.status;
    if (p.capture_event != nullptr) {
      Status synced = Sync(p.capture_event, "waiting for a snapshot copy");
      if (s.ok()) s = synced;
      events_.Release(p.capture_event);
      p.capture_event = nullptr;
    }
    if (p.captured) p.captured(s);
    if (!p.via_ring) {
      if (p.on_host) p.on_host(s);
      continue;
    }
    p.status = s;
    absl::MutexLock l(&queue_mu_);
    drain_queue_.push_back(std::move(p));
  }
}

void CudaSnapshotSourceImpl::DrainLoop() {
  (void)cudaSetDevice(device_);
  for (;;) {
    Pending p;
    {
      absl::MutexLock l(&queue_mu_);
      queue_mu_.Await(
          absl::Condition(this, &CudaSnapshotSourceImpl::DrainReady));
      if (drain_queue_.empty()) return;
      p = std::move(drain_queue_.front());
      drain_queue_.pop_front();
    }
    Status s = p.status;
    if (p.host_event != nullptr) {
      Status synced = Sync(p.host_event, "waiting for a drain copy");
      if (s.ok()) s = synced;
      events_.Release(p.host_event);
    }
    {
      absl::MutexLock l(&ring_mu_);
      ring_->FreeOldest();
    }
    if (p.on_host) p.on_host(s);
  }
}

Status CudaSnapshotSourceImpl::RegisterStaging(void* base, size_t len) {
  if (base == nullptr || len == 0) {
    return absl::InvalidArgumentError(
        "staging memory to register is empty or null");
  }
  ScopedDevice on(device_);
  STAGGER_RETURN_IF_ERROR(on.status());
  cudaError_t e = cudaHostRegister(base, len, cudaHostRegisterDefault);
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    // Pinned by its owner already: usable as is, and not ours to unpin.
    (void)cudaGetLastError();
    return absl::OkStatus();
  }
  STAGGER_RETURN_IF_ERROR(CudaStatus(
      e, absl::StrCat("pinning ", len, " bytes of staging memory at ",
                      absl::Hex(reinterpret_cast<uintptr_t>(base)),
                      " (cudaHostRegister)")));
  absl::MutexLock l(&staging_mu_);
  registered_.insert(base);
  return absl::OkStatus();
}

void CudaSnapshotSourceImpl::UnregisterStaging(void* base) {
  {
    absl::MutexLock l(&staging_mu_);
    if (registered_.erase(base) == 0) return;
  }
  ScopedDevice on(device_);
  // The memory stays valid and usable when unpinning fails; nothing for the
  // caller to do about it.
  CudaStatus(cudaHostUnregister(base), "unpinning staging memory")
      .IgnoreError();
}

CudaSnapshotStats CudaSnapshotSourceImpl::stats() const {
  CudaSnapshotStats s;
  s.device_ring_bytes = ring_bytes_;
  s.chunks_via_device = chunks_via_device_.load(std::memory_order_relaxed);
  s.chunks_direct = chunks_direct_.load(std::memory_order_relaxed);
  s.bytes_via_device = bytes_via_device_.load(std::memory_order_relaxed);
  s.bytes_direct = bytes_direct_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace

bool CudaDeviceAvailable() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

Result<std::unique_ptr<SnapshotSource>> NewCudaSnapshotSource(
    const CudaSnapshotOptions& options) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return Status(
        absl::StatusCode::kUnavailable,
        CudaStatus(e, "no usable CUDA device (cudaGetDeviceCount)").message());
  }
  if (n == 0) return absl::UnavailableError("no CUDA device is visible");
  if (options.device < 0 || options.device >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", options.device, " does not exist (", n, " visible)"));
  }
  auto source = std::make_unique<CudaSnapshotSourceImpl>(options.device);
  STAGGER_RETURN_IF_ERROR_CTX(source->Init(options),
                              "setting up snapshots on CUDA device ",
                              options.device);
  return std::unique_ptr<SnapshotSource>(std::move(source));
}

}  // namespace stagger::client
