#include "bench/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/testutil/process.h"

namespace stagger::bench {
namespace {

std::string LogTail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string log = ss.str();
  if (log.size() > 2000) log = "..." + log.substr(log.size() - 2000);
  return log.empty() ? "(empty log)" : log;
}

// The value of "key=VALUE" in a whitespace-separated line.
std::string Field(const std::string& line, const std::string& key) {
  size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  at += key.size() + 2;
  size_t end = line.find_first_of(" \n", at);
  return line.substr(at, end == std::string::npos ? end : end - at);
}

}  // namespace

Result<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::string& data_dir, double timeout_s,
    const std::vector<std::string>& extra_args) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "no stagger-server at ", binary,
        " (build the stagger-server target or set STAGGER_BIN_DIR)"));
  }
  std::string log = data_dir + ".server.log";
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("pipe: ", strerror(errno)));
  }
  std::vector<std::string> args = {binary, "--data", data_dir};
  if (std::find(extra_args.begin(), extra_args.end(), "--listen") ==
      extra_args.end()) {
    // Below the ephemeral ports: a restart on the address (disk_meter.h)
    // cannot find it taken by an outgoing connection.
    args.insert(args.end(), {"--listen", testutil::ListenAddress()});
  }
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int log_fd =
      open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // fork + exec rather than posix_spawn: the child asks to be killed when
  // the benchmark dies, so a crashed run leaves no daemon behind. Only
  // async-signal-safe calls between fork and exec.
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(pipefd[1], STDOUT_FILENO);
    if (log_fd >= 0) dup2(log_fd, STDERR_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  int fork_errno = errno;
  close(pipefd[1]);
  if (log_fd >= 0) close(log_fd);
  if (pid < 0) {
    close(pipefd[0]);
    return absl::UnavailableError(
        absl::StrCat("cannot start ", binary, ": ", strerror(fork_errno)));
  }
  std::unique_ptr<ServerProcess> server(new ServerProcess(pid, pipefd[0]));

  std::string out;
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration<double>(timeout_s);
  while (out.find('\n') == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p = {pipefd[0], POLLIN, 0};
    int n = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (n < 0 && errno == EINTR) continue;
    char buf[512];
    ssize_t got = n > 0 ? read(pipefd[0], buf, sizeof(buf)) : 0;
    if (got <= 0) {
      return absl::UnavailableError(absl::StrCat(
          "stagger-server ", n == 0 ? "did not become ready" : "exited",
          " (log ", log, "):\n", LogTail(log)));
    }
    out.append(buf, static_cast<size_t>(got));
  }
  server->grpc_ = Field(out, "grpc");
  server->data_ = Field(out, "data");
  server->metrics_ = Field(out, "metrics");
  if (out.rfind("stagger-server ready", 0) != 0 || server->grpc_.empty()) {
    return absl::UnavailableError(
        absl::StrCat("unexpected stagger-server output: ", out));
  }
  return server;
}

ServerProcess::~ServerProcess() { Stop(); }

void ServerProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  // Its shutdown makes everything durable; give it a while, then kill it.
  for (int i = 0; i < 300; ++i) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  if (out_fd_ >= 0) close(out_fd_);
  out_fd_ = -1;
}

}  // namespace stagger::bench
