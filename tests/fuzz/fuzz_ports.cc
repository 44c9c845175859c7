// Fuzz target: raw bytes to every TCP port a running stagger-server
// listens on. The server runs in this process (loopback, metrics on), so a
// crash anywhere in it, UCX's code included, is the fuzzer's crash. Input:
// the first byte picks the port (by index, modulo the ports found in
// /proc), the rest is sent on a fresh connection, which is closed after up
// to 20 ms of reading.
//
// Inputs for UCX's own tcp port that begin with UCX's 8-byte magic are
// skipped: UCX 1.13 aborts on some of them (transport/README.md, "Ports"),
// a known crash that would stop every run at once.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "server/server.h"
#include "tests/testutil/process.h"

namespace {

struct Target {
  std::string dir;
  std::unique_ptr<stagger::server::Server> server;
  std::vector<stagger::testutil::ListeningPort> ports;
  uint16_t grpc_port = 0, metrics_port = 0;
};

uint16_t PortOf(const std::string& host_port) {
  return static_cast<uint16_t>(
      std::atoi(host_port.substr(host_port.rfind(':') + 1).c_str()));
}

Target& Running() {
  static Target* t = [] {
    setenv("UCX_TLS", "sm,tcp", /*overwrite=*/0);
    auto* out = new Target();
    out->dir = std::filesystem::temp_directory_path() /
               ("stagger-fuzz-ports-" + std::to_string(getpid()));
    stagger::server::ServerOptions o;
    o.data_dir = out->dir;
    o.listen = "127.0.0.1:0";
    o.metrics_listen = "127.0.0.1:0";
    auto s = stagger::server::Server::Start(o);
    if (!s.ok()) {
      std::fprintf(stderr, "fuzz_ports: %s\n", s.status().ToString().c_str());
      std::abort();
    }
    out->server = std::move(*s);
    out->grpc_port = PortOf(out->server->grpc_address());
    out->metrics_port = PortOf(out->server->metrics_address());
    out->ports = stagger::testutil::ListeningPorts(getpid());
    std::fprintf(stderr, "fuzz_ports: %zu listening ports:", out->ports.size());
    for (const auto& p : out->ports) {
      std::fprintf(stderr, " %s:%u", p.host.c_str(), p.port);
    }
    std::fprintf(stderr, "\n");
    std::atexit([] {
      Running().server.reset();
      std::error_code ec;
      std::filesystem::remove_all(Running().dir, ec);
    });
    return out;
  }();
  return *t;
}

void Send(const stagger::testutil::ListeningPort& p, const uint8_t* data,
          size_t size) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(p.port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return;
  }
  pollfd pfd{fd, POLLOUT, 0};
  if (poll(&pfd, 1, 200) == 1) {
    size_t off = 0;
    while (off < size) {
      ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    char buf[4096];
    pfd.events = POLLIN;
    while (poll(&pfd, 1, 20) == 1 && recv(fd, buf, sizeof buf, 0) > 0) {
    }
  }
  close(fd);
}

}  // namespace

// UCX's tcp transport frees a connection's state on a later pass of its
// progress loop, after libFuzzer's leak check of that input has run.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libucs.so\nleak:libuct.so\nleak:libucp.so\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Target& t = Running();
  if (t.ports.empty()) std::abort();  // nothing to fuzz: a broken harness
  const auto& port = t.ports[data[0] % t.ports.size()];
  static const uint8_t kUcxMagic[8] = {0x78, 0x56, 0x34, 0x12,
                                       0xbe, 0xba, 0xfe, 0xca};
  const bool ucx_port = port.port != t.grpc_port && port.port != t.metrics_port;
  if (ucx_port && size >= 9 && std::memcmp(data + 1, kUcxMagic, 8) == 0) {
    return 0;
  }
  Send(port, data + 1, size - 1);
  return 0;
}
