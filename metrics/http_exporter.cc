#include "metrics/http_exporter.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace stagger::metrics {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr int kReadTimeoutMs = 2000;

Result<std::pair<std::string, uint16_t>> Split(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", host_port, "' is not HOST:PORT"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, static_cast<uint16_t>(port));
}

Result<addrinfo*> Resolve(const std::string& host, uint16_t port,
                          bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address ", host, ":", port, ": ", gai_strerror(rc)));
  }
  return res;
}

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the scraper went away
    done += static_cast<size_t>(n);
  }
}

std::string Answer(int code, const char* reason, const std::string& type,
                   const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason,
                      "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

Result<std::unique_ptr<HttpExporter>> HttpExporter::Start(
    const std::string& host_port, std::function<std::string()> render) {
  STAGGER_ASSIGN_OR_RETURN(auto hp, Split(host_port));
  STAGGER_ASSIGN_OR_RETURN(addrinfo * res, Resolve(hp.first, hp.second, true));
  int fd = -1;
  int err = 0;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      break;
    }
    err = errno;
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "metrics: cannot listen on ", host_port, ": ", std::strerror(err)));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const uint16_t port =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const bool v6 = hp.first.find(':') != std::string::npos;
  std::string address = v6 ? absl::StrCat("[", hp.first, "]:", port)
                           : absl::StrCat(hp.first, ":", port);
  int stop = ::eventfd(0, EFD_CLOEXEC);
  if (stop < 0) {
    ::close(fd);
    return absl::InternalError(
        absl::StrCat("metrics: eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<HttpExporter>(
      new HttpExporter(fd, stop, std::move(address), std::move(render)));
}

HttpExporter::HttpExporter(int listen_fd, int stop_fd, std::string address,
                           std::function<std::string()> render)
    : listen_fd_(listen_fd),
      stop_fd_(stop_fd),
      address_(std::move(address)),
      render_(std::move(render)),
      thread_([this] { Loop(); }) {}

HttpExporter::~HttpExporter() {
  uint64_t one = 1;
  while (::write(stop_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
  thread_.join();
  ::close(listen_fd_);
  ::close(stop_fd_);
}

void HttpExporter::Loop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(fd);
    ::close(fd);
  }
}

void HttpExporter::Serve(int fd) {
  std::string req;
  char buf[1024];
  while (req.find("\r\n\r\n") == std::string::npos &&
         req.find("\n\n") == std::string::npos) {
    if (req.size() > kMaxRequestBytes) {
      WriteAll(fd, Answer(431, "Request Header Fields Too Large", "text/plain",
                          "request too large\n"));
      return;
    }
    pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, kReadTimeoutMs) <= 0) return;  // silent client
    ssize_t got = ::recv(fd, buf, sizeof buf, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    req.append(buf, static_cast<size_t>(got));
  }
  const std::string line = req.substr(0, req.find_first_of("\r\n"));
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/")) {
    WriteAll(fd, Answer(400, "Bad Request", "text/plain",
                        "expected: GET /metrics HTTP/1.1\n"));
    return;
  }
  if (parts[0] != "GET" && parts[0] != "HEAD") {
    WriteAll(fd, Answer(405, "Method Not Allowed", "text/plain",
                        "only GET is served\n"));
    return;
  }
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    WriteAll(fd, Answer(404, "Not Found", "text/plain",
                        "metrics are at /metrics\n"));
    return;
  }
  std::string answer =
      Answer(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_());
  if (parts[0] == "HEAD") answer.resize(answer.find("\r\n\r\n") + 4);
  WriteAll(fd, answer);
}

Result<std::string> HttpGet(const std::string& host_port,
                            const std::string& path) {
  STAGGER_ASSIGN_OR_RETURN(auto hp, Split(host_port));
  STAGGER_ASSIGN_OR_RETURN(addrinfo * res, Resolve(hp.first, hp.second, false));
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", host_port));
  }
  WriteAll(fd, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host_port,
                            "\r\nConnection: close\r\n\r\n"));
  std::string reply;
  char buf[4096];
  while (true) {
    ssize_t got = ::recv(fd, buf, sizeof buf, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    reply.append(buf, static_cast<size_t>(got));
  }
  ::close(fd);
  const size_t end = reply.find("\r\n\r\n");
  if (end == std::string::npos) {
    return absl::DataLossError(
        absl::StrCat("GET ", path, " from ", host_port, ": no HTTP answer"));
  }
  const std::string status = reply.substr(0, reply.find("\r\n"));
  if (!absl::StartsWith(status, "HTTP/1.1 200")) {
    return absl::FailedPreconditionError(
        absl::StrCat("GET ", path, " from ", host_port, ": ", status));
  }
  return reply.substr(end + 4);
}

}  // namespace stagger::metrics
