// Session: what a CLI command holds while it talks to the servers.
#ifndef STAGGER_CLIENT_CLI_SESSION_H_
#define STAGGER_CLIENT_CLI_SESSION_H_

#include <memory>
#include <string>

#include "client/server_set.h"
#include "qos/executor.h"
#include "transport/transport.h"

namespace stagger::client {

struct Session {
  std::shared_ptr<transport::Transport> transport;
  std::shared_ptr<ServerSet> servers;  // closes before the transport
  std::unique_ptr<qos::Executor> executor;
};

// Connects to `servers` (gRPC HOST:PORT[,...]) over the process's UCX
// transport.
Result<Session> OpenSession(const std::string& servers);

// The CLI's --tls-ca (empty: plaintext), for every session and Checkpointer
// it opens.
void SetTlsCaFile(std::string path);
const std::string& TlsCaFile();

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CLI_SESSION_H_
