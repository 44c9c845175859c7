// ControlCalls: counts the control-plane calls a server takes, by method,
// through a gRPC server interceptor (so every rpc is counted, those its
// handlers refuse included, without touching the handlers). The metrics
// page shows them as stagger_server_control_calls_total{method="..."};
// bench_ranks divides them by the steps saved.
//
// Thread-safe.
#ifndef STAGGER_SERVER_CONTROL_CALLS_H_
#define STAGGER_SERVER_CONTROL_CALLS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace stagger::server {

class ControlCalls {
 public:
  // Installs the counting interceptor on `builder`; `this` must outlive
  // the server built.
  void Install(grpc::ServerBuilder& builder);
  // Calls so far by method name ("CommitShard"), in name order.
  std::map<std::string, uint64_t> Counts() const;
  void Add(const char* full_method);
  static constexpr size_t kMaxMethods = 64;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, uint64_t> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_CONTROL_CALLS_H_
