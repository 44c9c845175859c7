// Every TCP port a running stagger-server listens on (gRPC, metrics, and
// whatever UCX's own transports open), found from /proc rather than from
// what the server says, gets strangers' bytes: random bytes of several
// sizes, zeros, headers of each protocol spoken there with lengths too
// short and too long, a slow sender and hundreds of half-open connections.
// Afterwards the server is alive and a client saves and loads.
//
// What is known to still abort the server (UCX's tcp transport asserting
// on packets that begin with UCX's own magic number) is listed in
// docs/operations.md ("Ports") and is not sent here.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

using testutil::ListeningPort;

// A connected socket to `p` (its loopback address when it listens on any),
// or -1 when the connection is not made within half a second (a full
// backlog makes a blocking connect wait for minutes).
int Dial(const ListeningPort& p) {
  int fd = socket(p.v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_storage ss{};
  socklen_t len;
  if (p.v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(p.port);
    a->sin6_addr = in6addr_loopback;
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(p.port);
    inet_pton(AF_INET, p.host == "0.0.0.0" ? "127.0.0.1" : p.host.c_str(),
              &a->sin_addr);
    len = sizeof *a;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    pollfd pfd{fd, POLLOUT, 0};
    int err = 0;
    socklen_t err_len = sizeof err;
    if (errno != EINPROGRESS || poll(&pfd, 1, 500) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0 || err != 0) {
      close(fd);
      return -1;
    }
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{0, 50000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // A port that stops reading must not stall the test.
  timeval send_tv{0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_tv, sizeof send_tv);
  return fd;
}

// Writes `bytes` (stopping if the peer closes), reads what comes back for
// up to 50 ms, and closes.
void SendAndClose(const ListeningPort& p, const std::string& bytes) {
  int fd = Dial(p);
  if (fd < 0) return;
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  char buf[4096];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (recv(fd, buf, sizeof buf, 0) > 0 &&
         std::chrono::steady_clock::now() < until) {
  }
  close(fd);
}

std::string Random(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string Le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// Headers of the protocols spoken on the server's ports, each with a
// length that does not match what follows.
std::vector<std::string> LyingHeaders() {
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  // An HTTP/2 frame header: 24-bit length, type, flags, stream id.
  auto h2 = [](uint32_t len, char type) {
    std::string f;
    f.push_back(static_cast<char>(len >> 16));
    f.push_back(static_cast<char>(len >> 8));
    f.push_back(static_cast<char>(len));
    f.push_back(type);
    f.push_back(0);
    f.append("\0\0\0\1", 4);
    return f;
  };
  // The data plane's own frame (transport/internal/frame.h): magic, kind,
  // flags, op, header_len, request_id, payload_len.
  auto stg = [](uint32_t header_len, uint64_t payload_len) {
    std::string f = "STG1";
    f.append("\x01\x00\x01\x00", 4);
    f += Le32(header_len);
    f.append(8, '\0');
    f += Le32(static_cast<uint32_t>(payload_len));
    f += Le32(static_cast<uint32_t>(payload_len >> 32));
    return f;
  };
  return {
      preface + h2(0xffffff, 0) + "short",  // announces 16 MiB
      preface + h2(4, 1) + std::string(1024, 'h'),
      h2(8, 4) + std::string(1024, '\0'),  // no preface
      "GET /metrics HTTP/1.1\r\nContent-Length: 99999999\r\n\r\nx",
      "POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n" + std::string(2048, 'p'),
      "GET /" + std::string(70000, 'a') + " HTTP/1.1\r\n\r\n",
      std::string(16, '\0') + Le32(8) +
          std::string(1024, 'z'),  // 16 + 8 + 1 KiB
      stg(8, 0) + "abc",
      stg(0xffffffff, 0xffffffffffffffffull) + std::string(100, 's'),
      stg(4, 3) + std::string(4096, 'q'),
  };
}

TEST(HostilePortsTest, EveryListeningPortSurvivesStrangersBytes) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(
      dir.path() + "/data", {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<ListeningPort> ports = testutil::ListeningPorts((*server)->pid());
  // gRPC, metrics, and UCX's tcp transport on the loopback device: the
  // data plane has no socket listener of its own.
  ASSERT_GE(ports.size(), 3u);
  std::string listed;
  for (const auto& p : ports)
    absl::StrAppend(&listed, p.host, ":", p.port, " ");
  for (const auto& p : ports) {
    EXPECT_TRUE(p.host == "127.0.0.1" || p.host == "::1")
        << "without --auth-tokens the server listens on loopback only: "
        << listed;
  }

  std::mt19937 rng(20);
  const std::vector<std::string> lies = LyingHeaders();
  for (const ListeningPort& p : ports) {
    SCOPED_TRACE(absl::StrCat("port ", p.host, ":", p.port));
    for (size_t n : {1, 4, 24, 1000, 65536, 1 << 20}) {
      SendAndClose(p, Random(rng, n));
    }
    for (size_t n : {1, 16, 24, 4096}) SendAndClose(p, std::string(n, '\0'));
    for (const std::string& lie : lies) SendAndClose(p, lie);
    // A slow sender: a byte every 20 ms for a second.
    {
      int fd = Dial(p);
      for (int i = 0; fd >= 0 && i < 50; ++i) {
        char c = static_cast<char>(rng());
        if (send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (fd >= 0) close(fd);
    }
    // Half-open connections: connected, a few bytes, then held.
    // A port served one connection at a time (metrics) stops taking more
    // once its backlog is full; give up on it after a few refusals.
    std::vector<int> held;
    for (int i = 0, refused = 0; i < 200 && refused < 5; ++i) {
      int fd = Dial(p);
      if (fd < 0) {
        ++refused;
        continue;
      }
      send(fd, "\x16\x03\x01", 3, MSG_NOSIGNAL);
      held.push_back(fd);
    }
    EXPECT_GE(held.size(), 16u) << "the port stopped accepting";
    ASSERT_TRUE((*server)->Alive()) << "after the bytes sent to this port";
    for (int fd : held) close(fd);
  }
  ASSERT_TRUE((*server)->Alive());
  // The same ports are still open.
  EXPECT_EQ(testutil::ListeningPorts((*server)->pid()).size(), ports.size());

  // The metrics page is served again.
  {
    ListeningPort m;
    const std::string& addr = (*server)->metrics();
    m.host = addr.substr(0, addr.rfind(':'));
    m.port = static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1)));
    std::string reply;
    for (int attempt = 0; attempt < 50 && reply.empty(); ++attempt) {
      int fd = Dial(m);
      if (fd < 0) continue;
      const std::string get = "GET /metrics HTTP/1.1\r\n\r\n";
      send(fd, get.data(), get.size(), MSG_NOSIGNAL);
      char buf[256];
      for (int i = 0; i < 40 && reply.size() < 12; ++i) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0) reply.append(buf, static_cast<size_t>(n));
        if (n == 0) break;
      }
      close(fd);
    }
    EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 200") << reply;
  }

  // A client still saves and loads.
  CheckpointerOptions o;
  o.servers = (*server)->grpc();
  o.job = "after-strangers";
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  std::vector<char> w(3 << 20);
  testutil::FillPattern(w, testutil::WeightSeed(0, 1));
  ASSERT_TRUE((*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
  auto h = (*ck)->Save(1);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(h->Wait().ok()) << h->Wait();
  std::fill(w.begin(), w.end(), 0);
  ASSERT_TRUE((*ck)->Load(1).ok());
  std::vector<char> want(w.size());
  testutil::FillPattern(want, testutil::WeightSeed(0, 1));
  EXPECT_TRUE(w == want);
  EXPECT_TRUE((*server)->Alive());
}

}  // namespace
}  // namespace stagger
