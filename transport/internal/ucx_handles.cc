#include "transport/internal/ucx_handles.h"

#include <ucs/debug/log_def.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "transport/internal/ucx_status.h"
#include "util/log.h"

namespace stagger::transport_internal {

namespace {

// The UCX setting that lets cma carry rendezvous payloads between two
// processes of one host (transport/README.md, "Same host: cma").
constexpr char kCmaKey[] = "MEMORY_INVALIDATE";  // of the cma memory domain

// UCX's messages as stagger's log lines (component "ucx") on stderr. By
// default UCX prints them on stdout, where a process's output is its own:
// stagger-server's ready line, the CLI's listings. UCX has already
// filtered them by UCX_LOG_LEVEL; warnings and errors keep their level.
ucs_log_func_rc_t LogToStagger(const char* file, unsigned line,
                               const char* function, ucs_log_level_t level,
                               const ucs_log_component_config_t* comp_conf,
                               const char* format, va_list ap) {
  char text[1024];
  va_list copy;
  va_copy(copy, ap);
  vsnprintf(text, sizeof text, format, copy);
  va_end(copy);
  const char* base = strrchr(file, '/');
  const log::Level to = level <= UCS_LOG_LEVEL_ERROR  ? log::Level::kError
                        : level == UCS_LOG_LEVEL_WARN ? log::Level::kWarning
                                                      : log::Level::kInfo;
  log::Write(to, "ucx",
             absl::StrCat(base ? base + 1 : file, ":", line, " ", text));
  return UCS_LOG_FUNC_RC_STOP;
}

// A context with features AM and WAKEUP; with `net_devices`, only those
// network devices; with `cross_memory`, cma for rendezvous payloads unless
// the environment decides (UCX_CMA_MEMORY_INVALIDATE).
Result<ucp_context_h> InitContext(const std::string& net_devices,
                                  bool cross_memory) {
  static std::once_flag log_handler;
  std::call_once(log_handler, [] { ucs_log_push_handler(LogToStagger); });
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return FromUcs(st, "reading UCX configuration");
  if (!net_devices.empty()) {
    st = ucp_config_modify(config, "NET_DEVICES", net_devices.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return FromUcs(st, absl::StrCat("limiting UCX to the network devices '",
                                      net_devices, "'"));
    }
  }
  if (getenv("UCX_CMA_MEMORY_INVALIDATE") == nullptr) {
    st = ucp_config_modify(config, kCmaKey, cross_memory ? "y" : "n");
    if (st != UCS_OK) {
      ucp_config_release(config);
      return FromUcs(st, "setting UCX's cma transport up");
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

}  // namespace

Result<std::shared_ptr<UcxContext>> UcxContext::Create(
    const std::string& net_devices, bool cross_memory) {
  STAGGER_ASSIGN_OR_RETURN(ucp_context_h context,
                           InitContext(net_devices, cross_memory));
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

std::string EncodeWorkerAddress(absl::string_view bytes) {
  return absl::StrCat(kWorkerAddressPrefix, absl::BytesToHexString(bytes));
}

Result<std::string> DecodeWorkerAddress(absl::string_view text) {
  if (!absl::StartsWith(text, kWorkerAddressPrefix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "UCX address '", text.substr(0, 40),
        "' does not start with \"ucx:\" (a UCX listener has no socket "
        "address: connect to the address it reports)"));
  }
  absl::string_view hex = text.substr(kWorkerAddressPrefix.size());
  if (hex.empty() || hex.size() % 2 != 0 ||
      hex.size() > 2 * kMaxWorkerAddressBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX address of ", hex.size(),
                     " hex digits: expected an even number "
                     "from 2 to ",
                     2 * kMaxWorkerAddressBytes));
  }
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          "UCX address holds a character that is not a hex digit");
    }
  }
  return absl::HexStringToBytes(hex);
}

std::string WorkerLabel(absl::string_view bytes) {
  uint32_t h = 2166136261u;  // FNV-1a: the same label in every process
  for (unsigned char c : bytes) h = (h ^ c) * 16777619u;
  return absl::StrCat("ucx worker ", absl::Hex(h, absl::kZeroPad8));
}

}  // namespace stagger::transport_internal
