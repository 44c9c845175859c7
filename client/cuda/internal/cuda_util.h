// Helpers of the CUDA snapshot source: CUDA error -> Status, a scoped
// current-device switch, RAII handles for streams, events and device memory,
// and a pool of events reused across copies. Host code using the CUDA
// runtime API only; include only from files built with CUDA.
#ifndef STAGGER_CLIENT_CUDA_INTERNAL_CUDA_UTIL_H_
#define STAGGER_CLIENT_CUDA_INTERNAL_CUDA_UTIL_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "stagger/status.h"

namespace stagger::client_internal {

// UNAVAILABLE when the device or driver is missing, busy or out of memory,
// INTERNAL otherwise; the message is "<what>: <error name> (<error text>)".
// Also clears the runtime's last-error slot, so a non-sticky error does not
// resurface in an unrelated later call. OK for cudaSuccess.
Status CudaStatus(cudaError_t error, std::string_view what);

// Makes `device` current on this thread and restores the previous device
// when destroyed (the current device is per host thread and belongs to the
// caller).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool restore_ = false;
  Status status_;
};

struct StreamDeleter {
  void operator()(cudaStream_t s) const;
};
struct EventDeleter {
  void operator()(cudaEvent_t e) const;
};
struct DeviceMemoryDeleter {
  void operator()(void* p) const;
};
using UniqueStream =
    std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
using UniqueEvent =
    std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;
using UniqueDeviceMemory = std::unique_ptr<void, DeviceMemoryDeleter>;

// A non-blocking stream (no implicit ordering with the legacy default
// stream) of the lowest priority, on the current device.
Result<UniqueStream> NewLowPriorityStream();
// An event without timing (cheapest to record), current device. With
// `blocking_sync`, cudaEventSynchronize on it sleeps instead of spinning a
// CPU core that the training process may need.
Result<UniqueEvent> NewEvent(bool blocking_sync);

// Events created once and reused: Acquire takes a free one (creating one
// only when none is free), Release gives it back once nothing will wait on
// it any more. Thread-safe. Every acquired event must be released before
// the pool is destroyed.
class EventPool {
 public:
  EventPool() = default;
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // Events are blocking-sync (see NewEvent). Creates `n` events up front
  // (on the current device).
  Status Reserve(size_t n);
  Result<cudaEvent_t> Acquire();
  void Release(cudaEvent_t event);

 private:
  absl::Mutex mu_;
  std::vector<cudaEvent_t> free_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaEvent_t> all_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::client_internal

#endif  // STAGGER_CLIENT_CUDA_INTERNAL_CUDA_UTIL_H_
