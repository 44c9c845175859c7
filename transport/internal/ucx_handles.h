// RAII owners of UCX handles and the socket-address helpers used to create
// listeners and client endpoints. Endpoints are not wrapped here: closing one
// is asynchronous and is driven by UcxWorkerLoop, which owns them.
//
// Thread-safety: UcxContext may be shared by workers on different threads
// (it is created with mt_workers_shared). A worker or listener handle is used
// by one thread at a time.
#ifndef STAGGER_TRANSPORT_INTERNAL_UCX_HANDLES_H_
#define STAGGER_TRANSPORT_INTERNAL_UCX_HANDLES_H_

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "stagger/status.h"

namespace stagger::transport_internal {

// Owns one ucp_context (features AM and WAKEUP). Configuration comes from the
// environment (UCX_TLS and friends), with one exception: for
// `same_host_shared_memory` the shared-memory transports' peer-failure
// handling is turned on (MM_ERROR_HANDLING; UCX 1.13 leaves it off, and an
// endpoint that asks for peer-failure handling then never gets shared
// memory), unless UCX_MM_ERROR_HANDLING, UCX_POSIX_ERROR_HANDLING or
// UCX_SYSV_ERROR_HANDLING is set.
class UcxContext {
 public:
  // FAILED_PRECONDITION / INTERNAL (from FromUcs) when UCX cannot start.
  static Result<std::shared_ptr<UcxContext>> Create(
      bool same_host_shared_memory);
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

// Whether `ep` carries its active messages over a shared-memory transport
// (posix, sysv, xpmem, knem or cma lanes in ucp_ep_print_info; UCX 1.13 has
// no query for an endpoint's transports).
bool UsesSharedMemory(ucp_ep_h ep);

struct ListenerDeleter {
  void operator()(ucp_listener_h listener) const {
    ucp_listener_destroy(listener);
  }
};
using ListenerPtr = std::unique_ptr<ucp_listener, ListenerDeleter>;

// A resolved IPv4/IPv6 socket address.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;

  const sockaddr* get() const {
    return reinterpret_cast<const sockaddr*>(&storage);
  }
  uint16_t port() const;
  // "a.b.c.d:port" or "[v6]:port".
  std::string ToString() const;
};

// Resolves a numeric or named host (first IPv4 or IPv6 result) with `port`.
// INVALID_ARGUMENT naming the host when it does not resolve, UNAVAILABLE
// when the resolver is temporarily unreachable.
Result<SockAddr> ResolveSockAddr(const std::string& host, uint16_t port);

// Copies `length` bytes of a sockaddr UCX reported.
SockAddr SockAddrFrom(const sockaddr_storage& storage);

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_UCX_HANDLES_H_
