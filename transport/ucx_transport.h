// The UCX implementation of Transport: active messages over a UCX worker,
// rendezvous for large payloads. See README.md for the threads and the
// object graph.
//
// A listener opens no socket of its own: Listen("ucx:") makes a worker and
// reports its address ("ucx:" + hex of ucp_worker_get_address), and a client
// connects to that address (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS). Whoever
// listens hands the address only to peers it trusts (stagger-server: in the
// reply to an authenticated Hello). UCX's own transports still listen where
// they need to (tcp: one port per network device; README.md, "Ports").
//
// UCX is configured from the environment (UCX_TLS, UCX_NET_DEVICES, ...);
// on one host UCX_TLS=sm,tcp is the expected setting. No UCX type appears in
// this header.
#ifndef STAGGER_TRANSPORT_UCX_TRANSPORT_H_
#define STAGGER_TRANSPORT_UCX_TRANSPORT_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "stagger/status.h"
#include "transport/transport.h"

namespace stagger::transport {

struct UcxTransportOptions {
  // How long Connect() waits for the listener to answer the handshake before
  // it returns UNAVAILABLE.
  std::chrono::milliseconds connect_timeout{5000};
  // Payloads of at least this many bytes are sent with rendezvous: the
  // receiver pulls them into an aligned Buffer when it has room.
  size_t rndv_threshold = 64 << 10;
  // Per worker (one per Listener and per Connection): rendezvous bytes being
  // pulled at once. Further messages wait, and so do their senders. One
  // message larger than this is still pulled when it is alone.
  size_t max_inflight_pull_bytes = 512ull << 20;
  // Freed pull buffers kept for reuse (buffer_pool.h), for all listeners
  // and connections of this transport together, so that memory stays
  // bounded (in flight + this) and pages are not faulted in afresh for
  // every payload.
  size_t pull_buffer_cache_bytes = 128ull << 20;
  // Pull buffers on huge pages (BufferPool::Create): for a receiver that
  // keeps what it receives (stagger-server with a memory tier).
  bool huge_page_buffers = false;
  // Pull buffers mapped and faulted ahead, on a thread of the transport,
  // for payloads of `prefill_payload_bytes` (plus the listeners' headroom,
  // `prefill_headroom`), until the cache holds `prefill_bytes` (at most
  // pull_buffer_cache_bytes): a receiver that keeps what it receives (the
  // memory tier) takes its first payloads without page faults.
  size_t prefill_bytes = 0;
  size_t prefill_payload_bytes = 4 << 20;
  size_t prefill_headroom = 0;
  // Upper bound on how long destroying a Listener or Connection waits for
  // its endpoints to close cleanly.
  std::chrono::milliseconds close_timeout{2000};
  // UCX's network devices (UCX_NET_DEVICES syntax, e.g. "lo" or
  // "mlx5_0:1,eth0"); "" leaves UCX_NET_DEVICES (or UCX's default: all)
  // in force. UCX's tcp transport listens on one port per device.
  std::string net_devices;
  // Rendezvous payloads between two processes of one host (the same IPC and
  // PID namespaces) travel by cross-memory attach (UCX's cma transport:
  // one copy, no socket); other peers are not affected. The environment's
  // UCX_CMA_MEMORY_INVALIDATE, when set, decides instead. README.md,
  // "Same host: cma".
  bool cross_memory = true;
};

// Creates the UCX context. FAILED_PRECONDITION or INTERNAL when UCX cannot
// start (no usable transport, bad UCX_* settings).
//
// Listeners and Connections made by the transport may outlive it. Each has
// its own UCX worker and progress thread; handler and reply callbacks run on
// that thread. Destroying one stops its thread; pending calls complete with
// UNAVAILABLE. Do not destroy a Listener from its own handler or a
// Connection from its own reply callback unless nothing else uses it: the
// shutdown then finishes after the callback returns.
Result<std::unique_ptr<Transport>> NewUcxTransport(
    const UcxTransportOptions& options = {});

}  // namespace stagger::transport

#endif  // STAGGER_TRANSPORT_UCX_TRANSPORT_H_
