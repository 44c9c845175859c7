// stagger::Status and stagger::Result<T>, with the two propagation macros.
//
// Status codes have fixed meanings across stagger (see docs/design.md §9):
// UNAVAILABLE retryable peer/transport failure, DATA_LOSS checksum or
// corruption, RESOURCE_EXHAUSTED no space or credits, DEADLINE_EXCEEDED,
// ABORTED version or commit conflict, FAILED_PRECONDITION wrong state,
// INVALID_ARGUMENT caller error, NOT_FOUND.
#ifndef STAGGER_STATUS_H_
#define STAGGER_STATUS_H_

#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace stagger {

using Status = absl::Status;
template <typename T>
using Result = absl::StatusOr<T>;

// Debian 12's Abseil is built with its own absl::string_view, a type
// distinct from std::string_view. Convert explicitly where the two meet
// (absl::StrCat arguments, Status messages).
inline absl::string_view AsAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// Returns `s` with "context: " prefixed to its message; OK stays OK.
// Use once per layer boundary (path, job/step, chunk id, peer).
inline Status WithContext(const Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace stagger

#define STAGGER_STATUS_CONCAT_INNER_(a, b) a##b
#define STAGGER_STATUS_CONCAT_(a, b) STAGGER_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (a Status); returns it from the caller if not OK.
#define STAGGER_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::stagger::Status stagger_status_ = (expr);        \
    if (!stagger_status_.ok()) return stagger_status_; \
  } while (0)

// As STAGGER_RETURN_IF_ERROR, with "context: " prefixed on the way out:
// the arguments after `expr` are joined by absl::StrCat only on error, so
// a path or chunk id costs nothing while all goes well.
//   STAGGER_RETURN_IF_ERROR_CTX(file->Sync(), "segment ", id, " of ", job);
#define STAGGER_RETURN_IF_ERROR_CTX(expr, ...)                    \
  do {                                                            \
    ::stagger::Status stagger_status_ = (expr);                   \
    if (!stagger_status_.ok()) {                                  \
      return ::stagger::WithContext(stagger_status_,              \
                                    ::absl::StrCat(__VA_ARGS__)); \
    }                                                             \
  } while (0)

// Evaluates `rexpr` (a Result<T>); on error returns its status, otherwise
// moves the value into `lhs` (which may be a declaration).
#define STAGGER_ASSIGN_OR_RETURN(lhs, rexpr) \
  STAGGER_ASSIGN_OR_RETURN_IMPL_(            \
      STAGGER_STATUS_CONCAT_(stagger_result_, __LINE__), lhs, rexpr)
#define STAGGER_ASSIGN_OR_RETURN_IMPL_(result, lhs, rexpr) \
  auto result = (rexpr);                                   \
  if (!result.ok()) return std::move(result).status();     \
  lhs = std::move(result).value()

#endif  // STAGGER_STATUS_H_
