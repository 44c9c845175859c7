// Session: what a CLI command holds while it talks to the servers.
#ifndef STAGGER_CLIENT_CLI_SESSION_H_
#define STAGGER_CLIENT_CLI_SESSION_H_

#include <memory>
#include <string>

#include "client/server_set.h"
#include "transport/transport.h"
#include "util/executor.h"

namespace stagger::client {

struct Session {
  // An embedded server ("embedded:DIR" in the list), closed last.
  std::shared_ptr<void> embedded;
  std::shared_ptr<transport::Transport> transport;
  std::shared_ptr<ServerSet> servers;  // closes before the transport
  std::unique_ptr<Executor> executor;
};

// Connects to `servers` (gRPC HOST:PORT[,...], or embedded:DIR to open
// DIR with a server inside this process) over the process's UCX
// transport. Goes on while one server answers (the others are marked
// down).
Result<Session> OpenSession(const std::string& servers);

// Step `step_text` ("latest" or a number) of `job` with every rank's
// manifest; NOT_FOUND when it is not complete. (restore.cc)
Result<pb::GetStepReply> CompleteStep(Session& session, const std::string& job,
                                      const std::string& step_text);

// A step's durability level: "memory" while a rank's shard is
// memory-level (a save with durability "memory" not yet on disk), else
// "disk".
inline const char* Level(const pb::StepInfo& s) {
  return s.memory_ranks().empty() ? "disk" : "memory";
}

// The CLI's --tls-ca (empty: plaintext), for every session and Checkpointer
// it opens.
void SetTlsCaFile(std::string path);
const std::string& TlsCaFile();
// The CLI's --token (or $STAGGER_TOKEN), likewise.
void SetToken(std::string token);
const std::string& Token();

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CLI_SESSION_H_
