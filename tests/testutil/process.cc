#include "tests/testutil/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace stagger::testutil {
namespace {

// Built before fork(): the child of a threaded process must not allocate.
std::vector<char*> Argv(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}

[[noreturn]] void Exec(std::vector<char*>& args) {
  execv(args[0], args.data());
  _exit(127);
}

}  // namespace

std::string BinDir() {
  if (const char* d = getenv("STAGGER_BIN_DIR")) return d;
  // Test binaries live in <build>/tests, the programs in <build>/bin.
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "build/bin";
  return (exe.parent_path().parent_path() / "bin").string();
}

TempDir::TempDir() {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "stagger-test-XXXXXX").string();
  char* p = mkdtemp(tmpl.data());
  path_ = p ? p : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

// Starts one stagger-server with `argv` and waits for its ready line.
Result<std::unique_ptr<ServerProcess>> ServerProcess::StartOnce(
    const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  std::vector<char*> args = Argv(argv);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    Exec(args);
  }
  close(fds[1]);
  auto p = std::unique_ptr<ServerProcess>(new ServerProcess());
  p->pid_ = pid;
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (line.find('\n') == std::string::npos) {
    int left =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now())
                             .count());
    struct pollfd pfd = {fds[0], POLLIN, 0};
    if (left <= 0 || poll(&pfd, 1, left) <= 0) break;
    char buf[256];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, n);
  }
  close(fds[0]);
  const std::string kReady = "stagger-server ready grpc=";
  size_t g = line.find(kReady);
  size_t d = line.find(" data=");
  size_t nl = line.find('\n');
  if (g != 0 || d == std::string::npos || nl == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat("stagger-server did not get ready; printed '", line, "'"));
  }
  p->grpc_ = line.substr(kReady.size(), d - kReady.size());
  p->data_ = line.substr(d + 6, nl - d - 6);
  if (size_t m = p->data_.find(" metrics="); m != std::string::npos) {
    p->metrics_ = p->data_.substr(m + 9);
    p->data_.resize(m);
  }
  return p;
}

Result<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& data_dir, const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = {BinDir() + "/stagger-server", "--data",
                                   data_dir};
  auto listen = std::find(extra_args.begin(), extra_args.end(), "--listen");
  const bool any_port =
      listen == extra_args.end() ||
      (listen + 1 != extra_args.end() && listen[1] == "127.0.0.1:0");
  if (!any_port) {
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    return StartOnce(argv);
  }
  // A port of our choosing, so that a restart can listen on it again: one
  // the kernel hands out itself may meanwhile be the source port of some
  // outgoing connection. Another test may take the same one between our
  // check and the server's bind; then another is tried.
  std::vector<std::string> rest;
  for (auto it = extra_args.begin(); it != extra_args.end(); ++it) {
    if (it == listen) {
      ++it;
      continue;
    }
    rest.push_back(*it);
  }
  Result<std::unique_ptr<ServerProcess>> last =
      absl::UnavailableError("no port to listen on");
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::vector<std::string> a = argv;
    a.insert(a.end(), {"--listen", ListenAddress()});
    a.insert(a.end(), rest.begin(), rest.end());
    last = StartOnce(a);
    if (last.ok()) return last;
  }
  return last;
}

int ListenLoopback(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

std::string ListenAddress() {
  // Outgoing connections take their source ports from the kernel's
  // ephemeral range; ports below it are taken only by an explicit bind.
  int low = 32768;
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  f >> low;
  const int kFirst = 10000;
  if (low - kFirst < 1000) return "127.0.0.1:0";
  static std::atomic<uint64_t> counter{0};
  uint64_t seed = static_cast<uint64_t>(getpid()) * 7919 +
                  counter.fetch_add(1) * 104729 +
                  std::chrono::steady_clock::now().time_since_epoch().count();
  for (int i = 0; i < 64; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    const int port = kFirst + static_cast<int>((seed >> 33) % (low - kFirst));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free_now =
        bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    close(fd);
    if (free_now) return absl::StrCat("127.0.0.1:", port);
  }
  return "127.0.0.1:0";
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) Stop(SIGKILL);
}

bool ServerProcess::Alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

std::vector<ListeningPort> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fd_dir, ec)) {
    std::error_code link_ec;
    const std::string target =
        std::filesystem::read_symlink(e.path(), link_ec).string();
    if (absl::StartsWith(target, "socket:[")) {
      inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  std::vector<ListeningPort> out;
  for (bool v6 : {false, true}) {
    std::ifstream f(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    std::string line;
    std::getline(f, line);  // the column names
    while (std::getline(f, line)) {
      std::vector<std::string> col =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (col.size() < 10 || col[3] != "0A" || inodes.count(col[9]) == 0) {
        continue;
      }
      const size_t colon = col[1].find(':');
      ListeningPort p;
      p.v6 = v6;
      p.port = static_cast<uint16_t>(
          std::stoul(col[1].substr(colon + 1), nullptr, 16));
      std::string hex = col[1].substr(0, colon);
      if (v6 && absl::StartsWith(hex, "0000000000000000FFFF0000")) {
        // An IPv4-mapped address: IPv4 clients reach it.
        hex = hex.substr(24);
        p.v6 = false;
      }
      if (!p.v6) {
        const uint32_t a = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
        p.host = absl::StrCat(a & 0xff, ".", (a >> 8) & 0xff, ".",
                              (a >> 16) & 0xff, ".", a >> 24);
      } else {
        p.host = hex.find_first_not_of('0') == std::string::npos ? "::"
                 : hex == "00000000000000000000000001000000"     ? "::1"
                                                                 : hex;
      }
      out.push_back(p);
    }
  }
  return out;
}

int ServerProcess::Stop(int sig) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

RunResult RunProcess(const std::vector<std::string>& argv) {
  int fds[2];
  RunResult r;
  if (pipe(fds) != 0) return r;
  std::vector<char*> args = Argv(argv);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    Exec(args);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.out.append(buf, n);
  close(fds[0]);
  r.exit_code = WaitExit(pid);
  return r;
}

pid_t Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args = Argv(argv);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    Exec(args);
  }
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace stagger::testutil
