#include "transport/internal/ucx_status.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace stagger::transport_internal {
namespace {

absl::StatusCode CodeFor(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CANCELED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SOME_CONNECTS_FAILED:
    case UCS_ERR_BUSY:
    case UCS_ERR_ALREADY_EXISTS:
    case UCS_ERR_NO_PROGRESS:
      return absl::StatusCode::kUnavailable;
    case UCS_ERR_TIMED_OUT:
      return absl::StatusCode::kDeadlineExceeded;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_OUT_OF_RANGE:
      return absl::StatusCode::kResourceExhausted;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_MESSAGE_TRUNCATED:
      return absl::StatusCode::kInvalidArgument;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_NO_ELEM:
    case UCS_ERR_NO_MESSAGE:
    case UCS_ERR_SHMEM_SEGMENT:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

// ucs_status_string() gives the human text; the enum name helps grep.
const char* NameOf(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_UNREACHABLE:
      return "UCS_ERR_UNREACHABLE";
    case UCS_ERR_CONNECTION_RESET:
      return "UCS_ERR_CONNECTION_RESET";
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return "UCS_ERR_ENDPOINT_TIMEOUT";
    case UCS_ERR_REJECTED:
      return "UCS_ERR_REJECTED";
    case UCS_ERR_NOT_CONNECTED:
      return "UCS_ERR_NOT_CONNECTED";
    case UCS_ERR_CANCELED:
      return "UCS_ERR_CANCELED";
    case UCS_ERR_IO_ERROR:
      return "UCS_ERR_IO_ERROR";
    case UCS_ERR_BUSY:
      return "UCS_ERR_BUSY";
    case UCS_ERR_TIMED_OUT:
      return "UCS_ERR_TIMED_OUT";
    case UCS_ERR_NO_MEMORY:
      return "UCS_ERR_NO_MEMORY";
    case UCS_ERR_NO_RESOURCE:
      return "UCS_ERR_NO_RESOURCE";
    case UCS_ERR_INVALID_PARAM:
      return "UCS_ERR_INVALID_PARAM";
    case UCS_ERR_INVALID_ADDR:
      return "UCS_ERR_INVALID_ADDR";
    case UCS_ERR_UNSUPPORTED:
      return "UCS_ERR_UNSUPPORTED";
    case UCS_ERR_NO_DEVICE:
      return "UCS_ERR_NO_DEVICE";
    default:
      return "UCS_ERR";
  }
}

}  // namespace

Status FromUcs(ucs_status_t status, absl::string_view context) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return absl::OkStatus();
  return Status(
      CodeFor(status),
      absl::StrCat(context, ": UCX ", ucs_status_string(status), " (",
                   NameOf(status), " ", static_cast<int>(status), ")"));
}

void LogWarning(absl::string_view message) {
  log::Warning("stagger/transport",
               std::string_view(message.data(), message.size()));
}

}  // namespace stagger::transport_internal
