// Test helpers that run stagger's binaries as real processes.
#ifndef STAGGER_TESTS_TESTUTIL_PROCESS_H_
#define STAGGER_TESTS_TESTUTIL_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "stagger/status.h"

namespace stagger::testutil {

// Directory of the built binaries: $STAGGER_BIN_DIR, else <build>/bin
// next to the running test's <build>/tests.
std::string BinDir();

// A temporary directory removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A running stagger-server. Killed (SIGKILL) on destruction if still alive.
class ServerProcess {
 public:
  // Starts stagger-server --data `data_dir` and waits (up to 60 s) for its
  // ready line. It listens on `extra_args`' --listen (a restart on the same
  // address), or where none is given or it is 127.0.0.1:0, on a free
  // ListenAddress() (another one if that was taken before it bound it).
  static Result<std::unique_ptr<ServerProcess>> Start(
      const std::string& data_dir,
      const std::vector<std::string>& extra_args = {});
  ~ServerProcess();

  const std::string& grpc() const { return grpc_; }
  const std::string& data() const { return data_; }
  // The metrics page's address (with --metrics-listen), else empty.
  const std::string& metrics() const { return metrics_; }
  // Sends `sig` and waits for the process; returns its wait status.
  int Stop(int sig);
  pid_t pid() const { return pid_; }
  // Whether the process is still running (it is reaped if it ended).
  bool Alive();

 private:
  static Result<std::unique_ptr<ServerProcess>> StartOnce(
      const std::vector<std::string>& argv);
  pid_t pid_ = -1;
  std::string grpc_, data_, metrics_;
};

// "127.0.0.1:P" with P free now and below the kernel's ephemeral port
// range, so no outgoing connection takes it while a server that listened
// there is restarted ("127.0.0.1:0" where that range leaves no room).
std::string ListenAddress();

// A TCP socket listening on 127.0.0.1 on a port the kernel picks (a
// scripted endpoint, a proxy); `*port` gets the port. -1 on failure.
int ListenLoopback(uint16_t* port);

// A TCP socket in LISTEN state.
struct ListeningPort {
  std::string host;  // numeric; "0.0.0.0" or "::" for any address
  uint16_t port = 0;
  bool v6 = false;
};
// Every TCP socket `pid` holds open in LISTEN state (from /proc/<pid>/fd
// and /proc/net/tcp{,6}).
std::vector<ListeningPort> ListeningPorts(pid_t pid);

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;     // stdout and stderr together
};

// Runs `argv` (argv[0] a path) to completion, capturing its output.
RunResult RunProcess(const std::vector<std::string>& argv);

// Starts `argv` without waiting; returns its pid (output to /dev/null).
pid_t Spawn(const std::vector<std::string>& argv);
// Waits for `pid`; returns its exit code, or -1 if a signal ended it.
int WaitExit(pid_t pid);

}  // namespace stagger::testutil

#endif  // STAGGER_TESTS_TESTUTIL_PROCESS_H_
