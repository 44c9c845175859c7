#include "transport/internal/ucx_handles.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/internal/ucx_status.h"

namespace stagger::transport_internal {

Result<std::shared_ptr<UcxContext>> UcxContext::Create() {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return FromUcs(st, "reading UCX configuration");

  ucp_params_t params{};
  params.field_mask =
      UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  // Each worker lives on its own thread, so the context itself is shared
  // between threads.
  params.mt_workers_shared = 1;
  ucp_context_h context = nullptr;
  st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) return FromUcs(st, "creating the UCX context");
  return std::shared_ptr<UcxContext>(new UcxContext(context));
}

UcxContext::~UcxContext() { ucp_cleanup(context_); }

Result<WorkerPtr> CreateWorker(const UcxContext& context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  ucs_status_t st = ucp_worker_create(context.get(), &params, &worker);
  if (st != UCS_OK) return FromUcs(st, "creating a UCX worker");
  return WorkerPtr(worker);
}

uint16_t SockAddr::port() const {
  if (storage.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  }
  if (storage.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return 0;
}

std::string SockAddr::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (storage.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return absl::StrCat(text, ":", port());
  }
  if (storage.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    return absl::StrCat("[", text, "]:", port());
  }
  return "<unknown address family>";
}

Result<SockAddr> ResolveSockAddr(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    // A resolver that is temporarily unreachable is worth a retry; a name
    // that does not exist is the caller's mistake.
    std::string why =
        absl::StrCat("cannot resolve host \"", host, "\": ", gai_strerror(rc));
    return rc == EAI_AGAIN ? absl::UnavailableError(why)
                           : absl::InvalidArgumentError(why);
  }
  SockAddr out;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    std::memcpy(&out.storage, ai->ai_addr, ai->ai_addrlen);
    out.length = ai->ai_addrlen;
    break;
  }
  freeaddrinfo(found);
  if (out.length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host \"", host, "\" has no IPv4 or IPv6 address"));
  }
  if (out.storage.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&out.storage)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&out.storage)->sin6_port = htons(port);
  }
  return out;
}

SockAddr SockAddrFrom(const sockaddr_storage& storage) {
  SockAddr out;
  out.storage = storage;
  out.length = storage.ss_family == AF_INET6 ? sizeof(sockaddr_in6)
                                             : sizeof(sockaddr_in);
  return out;
}

}  // namespace stagger::transport_internal
