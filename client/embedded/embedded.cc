#include "client/embedded/embedded.h"

#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/checkpointer_impl.h"
#include "server/server.h"
#include "util/log.h"

namespace stagger::client {
namespace {

absl::Mutex registry_mu;
std::map<std::string, std::weak_ptr<server::Server>>& Registry() {
  static auto* r = new std::map<std::string, std::weak_ptr<server::Server>>();
  return *r;
}

}  // namespace

Result<ResolvedServers> ResolveServers(const std::string& servers) {
  constexpr absl::string_view kPrefix = "embedded:";
  if (!absl::StartsWith(servers, kPrefix)) return ResolvedServers{servers, {}};
  std::string dir = servers.substr(kPrefix.size());
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        "servers 'embedded:' needs a directory, e.g. embedded:/tmp/ckpt");
  }
  std::error_code ec;
  std::string key = std::filesystem::weakly_canonical(dir, ec).string();
  if (ec) key = dir;

  absl::MutexLock lock(&registry_mu);
  std::shared_ptr<server::Server> srv = Registry()[key].lock();
  if (!srv) {
    server::ServerOptions o;
    o.data_dir = dir;
    o.listen = "127.0.0.1:0";
    // Inside a training process: the server's warnings and errors only,
    // unless $STAGGER_LOG_LEVEL asks for more.
    if (!log::LevelFromEnvironment()) {
      log::SetComponentFloor("stagger-server", log::Level::kWarning);
    }
    auto started = server::Server::Start(o);
    if (!started.ok()) {
      return WithContext(started.status(),
                         absl::StrCat("embedded server in ", dir));
    }
    srv = std::shared_ptr<server::Server>(std::move(*started));
    Registry()[key] = srv;
  }
  return ResolvedServers{srv->grpc_address(), srv};
}

}  // namespace stagger::client

namespace stagger {

Result<std::unique_ptr<Checkpointer>> Checkpointer::Open(
    const CheckpointerOptions& options) {
  STAGGER_RETURN_IF_ERROR(client::ValidateOptions(options));
  STAGGER_ASSIGN_OR_RETURN(client::ResolvedServers resolved,
                           client::ResolveServers(options.servers));
  return client::NewCheckpointer(options, resolved.addresses, nullptr,
                                 std::move(resolved.keepalive));
}

}  // namespace stagger
