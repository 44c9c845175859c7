// Hostile bytes at a running stagger-server while a good client saves and
// loads: random and truncated bytes on the gRPC port (raw TCP, with and
// without the HTTP/2 preface), random ops, headers and payloads on the UCX
// data plane, and the fuzz seed corpora (manifest, request and reply
// headers) sent as data-plane requests. Every request gets an answer or
// the connection is dropped; the good client's saves all load bit-exactly
// and the server is still serving at the end.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "format/data_plane.h"
#include "gtest/gtest.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"
#include "transport/transport.h"
#include "transport/ucx_transport.h"

namespace stagger {
namespace {

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Connects to host:port over TCP, writes `bytes`, reads until the peer
// closes or 50 ms pass, and closes.
void SendRaw(const std::string& address, const std::string& bytes) {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port =
      htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n =
          send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    timeval tv{0, 50000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    while (recv(fd, buf, sizeof buf, 0) > 0) {
    }
  }
  close(fd);
}

std::vector<std::string> SeedFiles() {
  std::vector<std::string> out;
  const std::string root = std::string(STAGGER_SOURCE_DIR) + "/tests/fuzz";
  for (const char* dir : {"manifest", "record", "frame"}) {
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator(root + "/" + dir, ec)) {
      std::ifstream f(e.path(), std::ios::binary);
      out.emplace_back(std::istreambuf_iterator<char>(f),
                       std::istreambuf_iterator<char>());
    }
  }
  return out;
}

TEST(HostileInputTest, ServerKeepsServingAGoodClient) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string grpc = (*server)->grpc();
  const std::string data = (*server)->data();
  std::atomic<bool> stop{false};

  // The good client: saves and loads, every step checked.
  std::thread good([&] {
    CheckpointerOptions o;
    o.servers = grpc;
    o.job = "good";
    o.chunk_size = 256 << 10;
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    std::vector<char> w(2 << 20);
    ASSERT_TRUE(
        (*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    for (int64_t step = 1; step <= 8; ++step) {
      testutil::FillPattern(w, testutil::WeightSeed(0, step));
      auto h = (*ck)->Save(step);
      ASSERT_TRUE(h.ok()) << h.status();
      ASSERT_TRUE(h->Wait().ok()) << "step " << step << ": " << h->Wait();
      std::fill(w.begin(), w.end(), 0);
      auto got = (*ck)->Load(step);
      ASSERT_TRUE(got.ok()) << got.status();
      std::vector<char> want(w.size());
      testutil::FillPattern(want, testutil::WeightSeed(0, step));
      EXPECT_TRUE(w == want) << "step " << step;
    }
    stop = true;
  });

  // gRPC port: random bytes, truncated HTTP/2, a preface then garbage.
  std::thread tcp([&] {
    std::mt19937 rng(5);
    const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    for (int i = 0; i < 150; ++i) {
      std::string bytes;
      switch (i % 3) {
        case 0:
          bytes = RandomBytes(rng, rng() % 4096);
          break;
        case 1:
          bytes = preface.substr(0, rng() % preface.size());
          break;
        default:
          bytes = preface + RandomBytes(rng, rng() % 2048);
      }
      SendRaw(grpc, bytes);
    }
  });

  // Data plane: random ops, headers and payloads, then the seeds.
  std::thread ucx([&] {
    auto transport = transport::NewUcxTransport();
    ASSERT_TRUE(transport.ok()) << transport.status();
    auto conn = (*transport)->Connect(data);
    ASSERT_TRUE(conn.ok()) << conn.status();
    std::mt19937 rng(9);
    size_t answered = 0;
    std::vector<std::string> seeds = SeedFiles();
    ASSERT_FALSE(seeds.empty());
    for (int i = 0; i < 400; ++i) {
      uint16_t op = static_cast<uint16_t>(1 + rng() % 8);
      std::string header;
      if (i % 2 == 0) {
        header = RandomBytes(rng, rng() % 300);
      } else {
        // A seed, whole or cut short, within the transport's header limit
        // (8 KiB; the client's side refuses longer ones before sending).
        const std::string& seed = seeds[rng() % seeds.size()];
        header =
            seed.substr(0, rng() % (std::min<size_t>(seed.size(), 8192) + 1));
        op = static_cast<uint16_t>(i % 4 == 1   ? format::DataOp::kPutChunk
                                   : i % 8 == 3 ? format::DataOp::kGetRange
                                                : format::DataOp::kGetChunk);
      }
      std::string payload =
          RandomBytes(rng, rng() % 3 == 0 ? rng() % 65536 : 0);
      auto reply = (*conn)->CallSync(op, header, payload);
      if (reply.ok()) {
        ++answered;
        auto r = format::DecodeReply(reply->header);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_FALSE(r->status.ok() &&
                     op == static_cast<uint16_t>(format::DataOp::kPutChunk))
            << "a random put was stored";
      } else {
        ADD_FAILURE() << "op " << op << " header " << header.size()
                      << " payload " << payload.size() << ": "
                      << reply.status();
      }
    }
    EXPECT_EQ(answered, 400u);
  });

  good.join();
  tcp.join();
  ucx.join();
  EXPECT_TRUE(stop);
  // Still serving: a fresh client saves and loads.
  CheckpointerOptions o;
  o.servers = grpc;
  o.job = "after";
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  std::vector<char> w(300 << 10, 7);
  ASSERT_TRUE((*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
  auto h = (*ck)->Save(1);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->Wait().ok()) << h->Wait();
}

}  // namespace
}  // namespace stagger
