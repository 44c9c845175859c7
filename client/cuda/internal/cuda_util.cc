#include "client/cuda/internal/cuda_util.h"

namespace stagger::client_internal {

namespace {

absl::StatusCode CodeFor(cudaError_t error) {
  switch (error) {
    // The device or driver is absent, busy, shutting down or out of
    // memory: a condition of the machine, not a bug in the call.
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorMemoryAllocation:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCudartUnloading:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

Status CudaStatus(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  // A non-sticky error stays in the per-thread last-error slot until read.
  (void)cudaGetLastError();
  return Status(CodeFor(error),
                absl::StrCat(AsAbsl(what), ": ", cudaGetErrorName(error), " (",
                             cudaGetErrorString(error), ")"));
}

ScopedDevice::ScopedDevice(int device) {
  cudaError_t e = cudaGetDevice(&previous_);
  if (e != cudaSuccess) {
    status_ = CudaStatus(e, "reading the current CUDA device");
    return;
  }
  if (previous_ == device) return;
  e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    status_ =
        CudaStatus(e, absl::StrCat("making CUDA device ", device, " current"));
    return;
  }
  restore_ = true;
}

ScopedDevice::~ScopedDevice() {
  // Best effort: the device existed when it was current before.
  if (restore_) (void)cudaSetDevice(previous_);
}

void StreamDeleter::operator()(cudaStream_t s) const {
  // Destroying a stream with work queued is legal: it is released once
  // that work completes.
  if (s != nullptr) (void)cudaStreamDestroy(s);
}

void EventDeleter::operator()(cudaEvent_t e) const {
  if (e != nullptr) (void)cudaEventDestroy(e);
}

void DeviceMemoryDeleter::operator()(void* p) const {
  // Callers free only after every copy touching `p` completed; an error
  // here (a faulted context) leaves nothing to recover.
  if (p != nullptr) (void)cudaFree(p);
}

Result<UniqueStream> NewLowPriorityStream() {
  int least = 0;
  int greatest = 0;
  STAGGER_RETURN_IF_ERROR(
      CudaStatus(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                 "querying CUDA stream priorities"));
  cudaStream_t s = nullptr;
  // `least` is the lowest priority: the copies yield to training kernels.
  STAGGER_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, least),
                 "creating the snapshot copy stream"));
  return UniqueStream(s);
}

Result<UniqueEvent> NewEvent(bool blocking_sync) {
  cudaEvent_t e = nullptr;
  unsigned flags = cudaEventDisableTiming;
  if (blocking_sync) flags |= cudaEventBlockingSync;
  STAGGER_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&e, flags), "creating a CUDA event"));
  return UniqueEvent(e);
}

EventPool::~EventPool() {
  absl::MutexLock l(&mu_);
  for (cudaEvent_t e : all_) (void)cudaEventDestroy(e);
}

Status EventPool::Reserve(size_t n) {
  absl::MutexLock l(&mu_);
  while (free_.size() < n) {
    STAGGER_ASSIGN_OR_RETURN(UniqueEvent e, NewEvent(/*blocking_sync=*/true));
    all_.push_back(e.get());
    free_.push_back(e.release());
  }
  return absl::OkStatus();
}

Result<cudaEvent_t> EventPool::Acquire() {
  {
    absl::MutexLock l(&mu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  // More copies are in flight than ever before: grow the pool by one.
  STAGGER_ASSIGN_OR_RETURN(UniqueEvent e, NewEvent(/*blocking_sync=*/true));
  absl::MutexLock l(&mu_);
  all_.push_back(e.get());
  return e.release();
}

void EventPool::Release(cudaEvent_t event) {
  if (event == nullptr) return;
  absl::MutexLock l(&mu_);
  free_.push_back(event);
}

}  // namespace stagger::client_internal
