// The embedded mode: "embedded:DIR" runs a real stagger-server inside this
// process (gRPC and UCX on loopback, storing under DIR), so one process on
// one machine needs no set-up. This target sits above both client and
// server; the core client library never links server code.
//
// Thread-safety: all functions are thread-safe.
#ifndef STAGGER_CLIENT_EMBEDDED_EMBEDDED_H_
#define STAGGER_CLIENT_EMBEDDED_EMBEDDED_H_

#include <memory>
#include <string>

#include "stagger/status.h"

namespace stagger::client {

struct ResolvedServers {
  std::string addresses;            // gRPC "host:port[,...]"
  std::shared_ptr<void> keepalive;  // holds an embedded server, if any
};

// "embedded:DIR": the in-process server for DIR (started on first use,
// shared while anyone holds a keepalive for it). Anything else is returned
// as it is. INVALID_ARGUMENT for "embedded:" without a directory.
Result<ResolvedServers> ResolveServers(const std::string& servers);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_EMBEDDED_EMBEDDED_H_
