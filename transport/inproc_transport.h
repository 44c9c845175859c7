// An in-process Transport with the semantics of the UCX one, for tests and
// single-process set-ups: addresses are "inproc:NAME", payloads are copied,
// request handlers run on a dispatcher thread per Listener and reply
// callbacks on a dispatcher thread per Connection (never on the caller's).
//
// Names live in one process-wide registry, shared by every transport that
// NewInProcTransport() returns. Listen("inproc:") or Listen("inproc:NAME")
// with an empty name picks a unique name; a name in use gives UNAVAILABLE.
// Destroying a Listener removes its name: calls in flight and later calls on
// its connections complete with UNAVAILABLE, and Connect() to the name gives
// UNAVAILABLE.
//
// Thread-safety: as documented in transport.h.
#ifndef STAGGER_TRANSPORT_INPROC_TRANSPORT_H_
#define STAGGER_TRANSPORT_INPROC_TRANSPORT_H_

#include <memory>

#include "transport/transport.h"

namespace stagger::transport {

inline constexpr std::string_view kInProcScheme = "inproc:";

std::unique_ptr<Transport> NewInProcTransport();

}  // namespace stagger::transport

#endif  // STAGGER_TRANSPORT_INPROC_TRANSPORT_H_
