// RAII owners of UCX handles and the text form of worker addresses (what
// listeners hand out and clients connect to). Endpoints are not wrapped here:
// closing one is asynchronous and is driven by UcxWorkerLoop, which owns them.
//
// Thread-safety: UcxContext may be shared by workers on different threads
// (it is created with mt_workers_shared). A worker or listener handle is used
// by one thread at a time.
#ifndef STAGGER_TRANSPORT_INTERNAL_UCX_HANDLES_H_
#define STAGGER_TRANSPORT_INTERNAL_UCX_HANDLES_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "stagger/status.h"

namespace stagger::transport_internal {

// Owns one ucp_context (features AM and WAKEUP). Configuration comes from the
// environment (UCX_TLS and friends); a non-empty `net_devices` replaces
// UCX_NET_DEVICES; `cross_memory` turns cma on for rendezvous payloads
// between processes of one host (UcxTransportOptions::cross_memory).
class UcxContext {
 public:
  // FAILED_PRECONDITION / INTERNAL (from FromUcs) when UCX cannot start.
  static Result<std::shared_ptr<UcxContext>> Create(
      const std::string& net_devices = "", bool cross_memory = true);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const { return context_; }

 private:
  explicit UcxContext(ucp_context_h context) : context_(context) {}
  ucp_context_h context_;
};

struct WorkerDeleter {
  void operator()(ucp_worker_h worker) const { ucp_worker_destroy(worker); }
};
using WorkerPtr = std::unique_ptr<ucp_worker, WorkerDeleter>;

// Creates a single-threaded worker with wakeup support.
Result<WorkerPtr> CreateWorker(const UcxContext& context);

// The worker's address (ucp_worker_get_address), for an endpoint made from
// it.
Result<std::string> WorkerAddress(ucp_worker_h worker);

// The text form of a worker address, as a UCX Listener reports it and
// Connect() takes it: "ucx:" and the address bytes in lower-case hex.
inline constexpr absl::string_view kWorkerAddressPrefix = "ucx:";
// Worker addresses are a few hundred bytes; anything far longer is refused.
inline constexpr size_t kMaxWorkerAddressBytes = 16 << 10;
std::string EncodeWorkerAddress(absl::string_view bytes);
// INVALID_ARGUMENT naming what is wrong when `text` is not "ucx:" followed by
// an even number (2 to 2 x kMaxWorkerAddressBytes) of hex digits.
Result<std::string> DecodeWorkerAddress(absl::string_view text);
// A short name for the worker at `bytes` in messages: "ucx worker " and 8
// hex digits of a hash of the address.
std::string WorkerLabel(absl::string_view bytes);

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_UCX_HANDLES_H_
