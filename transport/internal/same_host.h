// Shared memory between a client and a listener on the same host.
//
// A connection is made from a socket address, and UCX 1.13 gives such an
// endpoint only the transports of the network device the address resolved
// to: tcp on lo, never shared memory. So the listener offers, in its
// handshake answer, what the client needs for a second endpoint made from
// the listener worker's address: its host key, a token and that address.
// A client whose own host key is the same creates the endpoint, sends the
// token on it (kShmHello), and sends its requests there once the listener
// has paired it with the connection (kShmHelloAck). Replies keep coming on
// the socket endpoint.
//
// The host key names what shared memory between two processes needs: the
// same kernel boot, the same user (UCX maps the peer's segment through
// /proc/<pid>/fd) and the same IPC, PID and mount namespaces. Two processes
// with equal keys can reach each other's shared memory.
//
// Thread-safety: pure functions; SameHostKey() reads /proc once per call.
#ifndef STAGGER_TRANSPORT_INTERNAL_SAME_HOST_H_
#define STAGGER_TRANSPORT_INTERNAL_SAME_HOST_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "stagger/status.h"

namespace stagger::transport_internal {

// This process's host key; "" when part of it cannot be read (then no
// shared memory is offered or taken).
std::string SameHostKey();

struct ShmOffer {
  std::string host_key;
  uint64_t token = 0;
  std::string worker_address;  // ucp_worker_get_address bytes
};

// The kHelloAck header that carries `offer`:
//   "SHM1" | u16 key length | key | u64 token | u32 address length | address
// little-endian.
std::string EncodeShmOffer(const ShmOffer& offer);

// Parses a kHelloAck header. An empty header is no offer (NOT_FOUND); any
// other header that is not exactly one offer is DATA_LOSS naming what was
// wrong.
Result<ShmOffer> DecodeShmOffer(absl::string_view header);

// The kShmHello header: the token, 8 bytes little-endian.
std::string EncodeShmToken(uint64_t token);
Result<uint64_t> DecodeShmToken(absl::string_view header);

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_SAME_HOST_H_
