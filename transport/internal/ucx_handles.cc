#include "transport/internal/ucx_handles.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/internal/ucx_status.h"

namespace stagger::transport_internal {

namespace {

// A context with features AM and WAKEUP; with `mm_error_handling`, the
// shared-memory transports' peer-failure handling turned on.
Result<ucp_context_h> InitContext(bool mm_error_handling) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return FromUcs(st, "reading UCX configuration");
  if (mm_error_handling) {
    st = ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
    if (st != UCS_OK) {
      ucp_config_release(config);
      return FromUcs(st, "configuring UCX shared-memory error handling");
    }
  }
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
  return context;
}

// What `print` writes to a stream (UCX's print_info functions), or "".
template <typename Print>
std::string Printed(Print print) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "";
  print(stream);
  fclose(stream);
  std::string out(text, size);
  free(text);
  return out;
}

// Whether the context has a posix or sysv resource (ucp_context_print_info:
// UCX 1.13 has no query for them).
bool HasSharedMemoryResource(ucp_context_h context) {
  const std::string info =
      Printed([context](FILE* f) { ucp_context_print_info(context, f); });
  return info.find("-- posix/") != std::string::npos ||
         info.find("-- sysv/") != std::string::npos;
}

}  // namespace

Result<std::shared_ptr<UcxContext>> UcxContext::Create(
    bool same_host_shared_memory) {
  const bool mm_error_handling =
      same_host_shared_memory && getenv("UCX_MM_ERROR_HANDLING") == nullptr &&
      getenv("UCX_POSIX_ERROR_HANDLING") == nullptr &&
      getenv("UCX_SYSV_ERROR_HANDLING") == nullptr;
  STAGGER_ASSIGN_OR_RETURN(ucp_context_h context,
                           InitContext(mm_error_handling));
  if (mm_error_handling && !HasSharedMemoryResource(context)) {
    // No transport took the setting (UCX_TLS without sm), and UCX would
    // warn about that on stdout for every worker: start again without it.
    ucp_cleanup(context);
    STAGGER_ASSIGN_OR_RETURN(context, InitContext(false));
  }
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

Result<std::string> WorkerAddress(ucp_worker_h worker) {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  ucs_status_t st = ucp_worker_get_address(worker, &address, &length);
  if (st != UCS_OK) return FromUcs(st, "getting the UCX worker address");
  std::string out(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker, address);
  return out;
}

bool UsesSharedMemory(ucp_ep_h ep) {
  const std::string info = Printed([ep](FILE* f) { ucp_ep_print_info(ep, f); });
  size_t at = 0;
  while ((at = info.find("lane[", at)) != std::string::npos) {
    const size_t end = info.find('\n', at);
    const std::string line = info.substr(at, end - at);
    for (const char* tl : {":posix/", ":sysv/", ":xpmem/", ":knem/", ":cma/"}) {
      if (line.find(tl) != std::string::npos) return true;
    }
    at = end;
  }
  return false;
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
