// Shared memory between a client and a listener on one host
// (UcxTransportOptions::same_host_shared_memory, internal/same_host.h).
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "transport/ucx_transport.h"

namespace stagger::transport {
namespace {

UcxTransportOptions SharedMemoryOn() {
  UcxTransportOptions o;
  o.same_host_shared_memory = true;
  return o;
}

class Echo : public RequestHandler {
 public:
  void OnRequest(Message request,
                 std::unique_ptr<ReplyChannel> reply) override {
    reply->Send(request.op, std::move(request.header),
                std::move(request.payload));
  }
};

// One transport listening on loopback and connected to itself.
struct Linked {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> conn;
};

void Link(const UcxTransportOptions& options, RequestHandler* handler,
          Linked* out) {
  auto t = NewUcxTransport(options);
  ASSERT_TRUE(t.ok()) << t.status();
  out->transport = *std::move(t);
  auto listener = out->transport->Listen("127.0.0.1:0", handler);
  ASSERT_TRUE(listener.ok()) << listener.status();
  out->listener = *std::move(listener);
  auto conn = out->transport->Connect(out->listener->address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  out->conn = *std::move(conn);
}

// Calls until the connection has moved to shared memory, at most 5 s.
bool MovesToSharedMemory(Connection& conn) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!SendsOverSharedMemory(conn) &&
         std::chrono::steady_clock::now() < deadline) {
    if (!conn.CallSync(1, "ping", "").ok()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return SendsOverSharedMemory(conn);
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

TEST(UcxSharedMemoryTest, SameHostRequestsTravelOverSharedMemoryIntact) {
  Echo echo;
  Linked l;
  ASSERT_NO_FATAL_FAILURE(Link(SharedMemoryOn(), &echo, &l));
  Connection* conn = l.conn.get();
  ASSERT_TRUE(MovesToSharedMemory(*conn))
      << "UCX_TLS=" << (getenv("UCX_TLS") ? getenv("UCX_TLS") : "");
  // Eager, at the rendezvous threshold and a chunk-sized rendezvous.
  for (size_t size :
       {size_t{0}, size_t{100}, size_t{64} << 10, (size_t{4} << 20) + 3}) {
    const std::string payload = RandomBytes(size, static_cast<uint32_t>(size));
    Result<Message> r = conn->CallSync(7, "h" + std::to_string(size), payload);
    ASSERT_TRUE(r.ok()) << size << ": " << r.status();
    EXPECT_EQ(r->header, "h" + std::to_string(size));
    EXPECT_TRUE(r->payload.view() == payload) << size << " bytes differ";
  }
  EXPECT_TRUE(SendsOverSharedMemory(*conn));
}

TEST(UcxSharedMemoryTest, OffByDefault) {
  Echo echo;
  Linked l;
  ASSERT_NO_FATAL_FAILURE(Link(UcxTransportOptions(), &echo, &l));
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(l.conn->CallSync(1, "x", "y").ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(SendsOverSharedMemory(*l.conn));
}

TEST(UcxSharedMemoryTest, EitherSideCanKeepItOff) {
  for (bool listener_off : {true, false}) {
    SCOPED_TRACE(listener_off ? "listener off" : "client off");
    const UcxTransportOptions on = SharedMemoryOn();
    UcxTransportOptions off;
    auto server = NewUcxTransport(listener_off ? off : on);
    auto client = NewUcxTransport(listener_off ? on : off);
    ASSERT_TRUE(server.ok() && client.ok());
    Echo echo;
    auto listener = (*server)->Listen("127.0.0.1:0", &echo);
    ASSERT_TRUE(listener.ok()) << listener.status();
    auto conn = (*client)->Connect((*listener)->address());
    ASSERT_TRUE(conn.ok()) << conn.status();
    const std::string payload = RandomBytes(1 << 20, 3);
    // Long enough for the offer, the endpoint and its pairing, had there
    // been one (a same-host pair moves within a few round trips).
    for (int i = 0; i < 20; ++i) {
      Result<Message> r = (*conn)->CallSync(1, "x", payload);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->payload.view() == payload);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(SendsOverSharedMemory(**conn));
  }
}

TEST(UcxSharedMemoryTest, ListenerGoneFailsCallsInsteadOfHanging) {
  Echo echo;
  Linked l;
  ASSERT_NO_FATAL_FAILURE(Link(SharedMemoryOn(), &echo, &l));
  const std::string address = l.listener->address();
  ASSERT_TRUE(MovesToSharedMemory(*l.conn));
  l.listener.reset();
  const std::string payload = RandomBytes(4 << 20, 5);
  auto start = std::chrono::steady_clock::now();
  Result<Message> r = l.conn->CallSync(1, "after", payload);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find(address), std::string::npos)
      << r.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace stagger::transport
