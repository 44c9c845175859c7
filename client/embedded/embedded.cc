#include "client/embedded/embedded.h"

#include <filesystem>
#include <map>
#include <system_error>

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
  // A thread that cannot be made (the host's or the container's limit on
  // threads reached: thousands of ranks in one process) is an error to
  // return, not a std::system_error to end the process with.
  try {
    STAGGER_ASSIGN_OR_RETURN(client::ResolvedServers resolved,
                             client::ResolveServers(options.servers));
    return client::NewCheckpointer(options, resolved.addresses, nullptr,
                                   std::move(resolved.keepalive));
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "opening a Checkpointer for job '", options.job, "' rank ",
        options.rank, ": cannot start a thread (", e.what(),
        "): the process or host is at its limit "
        "of threads (ulimit -u, kernel.pid_max, cgroup pids.max)"));
  }
}

}  // namespace stagger
