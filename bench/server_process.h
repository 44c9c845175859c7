// ServerProcess: a stagger-server daemon started as a child process for a
// benchmark, stopped (SIGTERM, then SIGKILL after a grace period) when the
// object is destroyed. Its stderr goes to <data>/server.log, shown when it
// fails to start.
//
// Thread-safety: not thread-safe; one owner.
#ifndef STAGGER_BENCH_SERVER_PROCESS_H_
#define STAGGER_BENCH_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "stagger/status.h"

namespace stagger::bench {

class ServerProcess {
 public:
  // Runs `binary --data DATA_DIR --listen 127.0.0.1:0 EXTRA_ARGS...` (no
  // --listen of its own when EXTRA_ARGS has one: a restart on the same
  // address) and
  // waits (at most `timeout_s`) for its "stagger-server ready grpc=...
  // data=..." line.
  // NOT_FOUND when the binary is missing; UNAVAILABLE when it exits or does
  // not become ready in time (the message carries its log's tail).
  static Result<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::string& data_dir,
      double timeout_s = 30, const std::vector<std::string>& extra_args = {});
  ~ServerProcess();

  const std::string& grpc_address() const { return grpc_; }
  const std::string& data_address() const { return data_; }
  // The metrics page's "host:port"; "" unless started with --metrics-listen.
  const std::string& metrics_address() const { return metrics_; }
  pid_t pid() const { return pid_; }

 private:
  ServerProcess(pid_t pid, int out_fd) : pid_(pid), out_fd_(out_fd) {}
  void Stop();

  pid_t pid_;
  int out_fd_;
  std::string grpc_;
  std::string data_;
  std::string metrics_;
};

}  // namespace stagger::bench

#endif  // STAGGER_BENCH_SERVER_PROCESS_H_
