#include "client/server_set.h"

#include <grpcpp/grpcpp.h>
#include <xxhash.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace stagger::client {

Status FromGrpc(const grpc::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return Status(static_cast<absl::StatusCode>(s.error_code()),
                absl::StrCat(AsAbsl(what), ": ", s.error_message()));
}

Result<std::shared_ptr<ServerSet>> ServerSet::Connect(
    const std::string& servers, transport::Transport* transport,
    double timeout_s, const std::string& tls_ca_file) {
  std::shared_ptr<grpc::ChannelCredentials> creds =
      grpc::InsecureChannelCredentials();
  if (!tls_ca_file.empty()) {
    std::ifstream f(tls_ca_file);
    std::stringstream pem;
    pem << f.rdbuf();
    if (!f || pem.str().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TLS CA file '", tls_ca_file, "' cannot be read or is empty"));
    }
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = pem.str();
    creds = grpc::SslCredentials(o);
  }
  auto set = std::shared_ptr<ServerSet>(new ServerSet());
  set->timeout_s_ = timeout_s;
  std::vector<std::string> addrs = absl::StrSplit(servers, ',');
  if (servers.empty()) {
    return absl::InvalidArgumentError("no servers given");
  }
  for (const std::string& addr : addrs) {
    auto hp = transport::SplitHostPort(addr);
    if (!hp.ok()) return WithContext(hp.status(), "servers");
    auto conn = std::make_unique<ServerConn>();
    conn->address = addr;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    args.SetMaxSendMessageSize(256 << 20);
    auto channel = grpc::CreateCustomChannel(addr, creds, args);
    conn->stub = pb::Stagger::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(
                         std::min(timeout_s, 30.0) * 1000)));
    pb::HelloRequest req;
    req.set_client("stagger client");
    pb::HelloReply reply;
    Status s = FromGrpc(conn->stub->Hello(&ctx, req, &reply),
                        absl::StrCat("server ", addr));
    if (!s.ok()) {
      if (absl::IsDeadlineExceeded(s)) {
        s = absl::UnavailableError(
            absl::StrCat("server ", addr, " does not answer"));
      }
      if (!tls_ca_file.empty() && absl::IsUnavailable(s)) {
        s = WithContext(s, absl::StrCat("(TLS with CA ", tls_ca_file,
                                        ": does the server's certificate "
                                        "chain to it and name this host?)"));
      }
      return s;
    }
    auto data = transport->Connect(reply.data_address());
    if (!data.ok()) {
      return WithContext(data.status(),
                         absl::StrCat("data plane of server ", addr, " at ",
                                      reply.data_address()));
    }
    conn->data = std::move(*data);
    set->servers_.push_back(std::move(conn));
  }
  return set;
}

size_t ServerSet::Place(std::string_view key) const {
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < servers_.size(); ++i) {
    std::string k(key);
    k += '|';
    k += servers_[i]->address;
    uint64_t score = XXH3_64bits(k.data(), k.size());
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

ServerConn& ServerSet::ForSlot(uint32_t rank, const std::string& tensor,
                               uint64_t index) {
  return *servers_[Place(absl::StrCat("slot:", rank, "/", index, "/", tensor))];
}

ServerConn& ServerSet::Coordinator(const std::string& job) {
  return *servers_[Place("job:" + job)];
}

}  // namespace stagger::client
