// The one conversion from UCX status codes to stagger::Status, and the
// component's diagnostic log line.
//
// Thread-safety: pure functions; LogWarning may be called from any thread.
#ifndef STAGGER_TRANSPORT_INTERNAL_UCX_STATUS_H_
#define STAGGER_TRANSPORT_INTERNAL_UCX_STATUS_H_

#include <ucs/type/status.h>

#include "absl/strings/string_view.h"
#include "stagger/status.h"

namespace stagger::transport_internal {

// OK for UCS_OK (and UCS_INPROGRESS, which is not an error). Otherwise a
// Status whose message is "context: <UCX text> (<UCX name>)" and whose code
// follows docs/design.md §9: connection/peer failures are UNAVAILABLE, memory
// and resource limits RESOURCE_EXHAUSTED, timeouts DEADLINE_EXCEEDED,
// bad parameters INVALID_ARGUMENT, a missing feature or device
// FAILED_PRECONDITION, anything else INTERNAL.
Status FromUcs(ucs_status_t status, absl::string_view context);

// One line on stderr, prefixed "stagger/transport: ". For conditions that are
// handled (a dropped malformed frame, a peer that went away) but that an
// operator may want to see; each is logged once, where it is found.
void LogWarning(absl::string_view message);

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_UCX_STATUS_H_
