// ServerSet: the client's view of the storage servers of a job. For each
// server it holds a gRPC stub (control plane) and a data-plane connection
// (learned through Hello), and it places chunks and manifests on servers by
// rendezvous hashing, so every client and the CLI agree on where a chunk is
// without asking anyone.
//
// Thread-safety: immutable after Connect; all methods are thread-safe.
#ifndef STAGGER_CLIENT_SERVER_SET_H_
#define STAGGER_CLIENT_SERVER_SET_H_

#include <memory>
#include <string>
#include <vector>

#include "format/chunk_id.h"
#include "proto/stagger.grpc.pb.h"
#include "stagger/status.h"
#include "transport/transport.h"

namespace stagger::client {

struct ServerConn {
  std::string address;  // gRPC host:port as given
  std::unique_ptr<pb::Stagger::Stub> stub;
  std::unique_ptr<transport::Connection> data;
};

class ServerSet {
 public:
  // Parses "host:port[,host:port...]", says Hello to each server and opens
  // its data-plane connection over `transport` (not owned; must outlive the
  // set). INVALID_ARGUMENT for a malformed list, UNAVAILABLE naming the
  // server that does not answer.
  // With `tls_ca_file` (PEM), the control plane is gRPC over TLS and the
  // servers' certificates must chain to it.
  static Result<std::shared_ptr<ServerSet>> Connect(
      const std::string& servers, transport::Transport* transport,
      double timeout_s, const std::string& tls_ca_file = "");

  size_t size() const { return servers_.size(); }
  ServerConn& server(size_t i) { return *servers_[i]; }
  // The server that stores chunk `id`.
  // The server of chunk `index` of `rank`'s tensor `tensor`: every version
  // of that chunk (and so every delta with its base) lives there, whatever
  // its bytes.
  ServerConn& ForSlot(uint32_t rank, const std::string& tensor, uint64_t index);
  // The server that keeps the manifests of `job` (its coordinator).
  ServerConn& Coordinator(const std::string& job);
  double timeout_s() const { return timeout_s_; }

 private:
  size_t Place(std::string_view key) const;
  std::vector<std::unique_ptr<ServerConn>> servers_;
  double timeout_s_ = 60;
};

// grpc::Status -> Status with the same code; the message names `what`.
Status FromGrpc(const grpc::Status& s, std::string_view what);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_SERVER_SET_H_
