// Authorizer: per-job access tokens (stagger-server --auth-tokens FILE).
//
// The file holds one grant per line, "TOKEN JOB[,JOB...]", where a job of
// "*" means every job; blank lines and lines starting with '#' are
// skipped. Tokens are at least 16 characters of [A-Za-z0-9._~+/=-].
//
// Control plane: a client sends its token in the gRPC metadata key
// "x-stagger-token"; every call names its job and is refused unless the
// token's grant allows it. Data plane: Hello (authorized like any call)
// returns a random data-session key bound to the caller's grant; the
// client sends it once on its UCX connection (DataOp::kAuth) and every put
// and get on that connection is then checked against the grant.
//
// Thread-safety: thread-safe.
#ifndef STAGGER_SERVER_AUTH_H_
#define STAGGER_SERVER_AUTH_H_

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "absl/synchronization/mutex.h"
#include "stagger/status.h"

namespace stagger::server {

inline constexpr char kTokenMetadataKey[] = "x-stagger-token";

// What one token may touch.
struct Grant {
  std::string name;  // "token at FILE:LINE", for logs and errors
  bool all_jobs = false;
  std::set<std::string> jobs;
  bool Allows(const std::string& job) const {
    return all_jobs || jobs.count(job) != 0;
  }
};

class Authorizer {
 public:
  // INVALID_ARGUMENT naming the file and line for a malformed grant, a
  // short token, a repeated token or a bad job name.
  static Result<std::unique_ptr<Authorizer>> FromFile(const std::string& path);

  // The grant of `token`; UNAUTHENTICATED when it is empty or unknown.
  Result<const Grant*> Check(std::string_view token) const;
  // OK when `grant` allows `job`; PERMISSION_DENIED naming both otherwise.
  static Status CheckJob(const Grant& grant, const std::string& job);

  // A new data-session key bound to `grant` (the oldest keys are forgotten
  // past kMaxKeys: their connections must say Hello again).
  std::string MintDataKey(const Grant* grant);
  // The grant of a data-session key; UNAUTHENTICATED when unknown.
  Result<const Grant*> CheckDataKey(std::string_view key) const;

  static constexpr size_t kMaxKeys = 1 << 16;

 private:
  std::map<std::string, std::unique_ptr<Grant>, std::less<>> tokens_;
  mutable absl::Mutex mu_;
  std::map<std::string, const Grant*, std::less<>> keys_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> key_order_ ABSL_GUARDED_BY(mu_);
};

// True for a host that only this machine can reach: 127.0.0.0/8, ::1,
// localhost.
bool IsLoopbackHost(const std::string& host);

}  // namespace stagger::server

#endif  // STAGGER_SERVER_AUTH_H_
