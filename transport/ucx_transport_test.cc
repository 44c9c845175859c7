// UCX-specific behaviour: bad bytes from a raw UCX peer, the bounded
// connect wait, and rendezvous admission.
#include "transport/ucx_transport.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "transport/internal/frame.h"
#include "transport/internal/ucx_handles.h"

namespace stagger::transport {
namespace {

using transport_internal::EncodeFrame;
using transport_internal::Frame;
using transport_internal::FrameKind;
using transport_internal::kAmId;
using transport_internal::kFrameBytes;

class CountingEcho : public RequestHandler {
 public:
  void OnRequest(Message request,
                 std::unique_ptr<ReplyChannel> reply) override {
    {
      absl::MutexLock l(&mu_);
      ++requests_;
    }
    reply->Send(request.op, std::move(request.header),
                std::move(request.payload));
  }
  int requests() {
    absl::MutexLock l(&mu_);
    return requests_;
  }

 private:
  absl::Mutex mu_;
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
};

// A UCX client that speaks raw active messages, driven by the test thread.
class RawPeer {
 public:
  ~RawPeer() {
    if (ep_ != nullptr) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      Wait(ucp_ep_close_nbx(ep_, &p));
    }
  }

  void Connect(const std::string& address) {
    auto ctx = transport_internal::UcxContext::Create();
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    context_ = *ctx;
    auto worker = transport_internal::CreateWorker(*context_);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
    auto worker_address = transport_internal::DecodeWorkerAddress(address);
    ASSERT_TRUE(worker_address.ok()) << worker_address.status();
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address =
        reinterpret_cast<const ucp_address_t*>(worker_address->data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t st) {
      static_cast<RawPeer*>(arg)->error_ = st;
    };
    params.err_handler.arg = this;
    ASSERT_EQ(ucp_ep_create(worker_.get(), &params, &ep_), UCS_OK);

    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = kAmId;
    am.cb = [](void* arg, const void* header, size_t header_length, void*,
               size_t, const ucp_am_recv_param_t*) {
      static_cast<RawPeer*>(arg)->received_.emplace_back(
          static_cast<const char*>(header), header_length);
      return UCS_OK;
    };
    am.arg = this;
    ASSERT_EQ(ucp_worker_set_am_recv_handler(worker_.get(), &am), UCS_OK);
  }

  // Connect(), then the handshake a well-behaved client makes: a kHello,
  // answered by a kHelloAck.
  void ConnectAndHello(const std::string& address) {
    ASSERT_NO_FATAL_FAILURE(Connect(address));
    auto own = transport_internal::WorkerAddress(worker_.get());
    ASSERT_TRUE(own.ok()) << own.status();
    const std::string body = transport_internal::EncodeHello({*own, "raw"});
    Frame hello;
    hello.kind = FrameKind::kHello;
    hello.header_len = static_cast<uint32_t>(body.size());
    std::string bytes(kFrameBytes, '\0');
    EncodeFrame(hello, bytes.data());
    ASSERT_EQ(Send(bytes + body, "", /*rndv=*/false), UCS_OK);
    const std::string ack = WaitForMessage();
    ASSERT_GE(ack.size(), kFrameBytes);
    EXPECT_EQ(static_cast<FrameKind>(ack[4]), FrameKind::kHelloAck);
    received_.clear();
  }

  // Drives the worker until an AM arrived or 10 s pass; returns its AM
  // header ("" when none came).
  std::string WaitForMessage() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (received_.empty() && std::chrono::steady_clock::now() < deadline) {
      Drive();
    }
    return received_.empty() ? std::string() : received_.front();
  }

  // Sends one AM under the transport's id; returns the send's status.
  ucs_status_t Send(const std::string& am_header, const std::string& data,
                    bool rndv) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY | (rndv ? UCP_AM_SEND_FLAG_RNDV : 0);
    return Wait(ucp_am_send_nbx(ep_, kAmId, am_header.data(), am_header.size(),
                                data.data(), data.size(), &p));
  }

  // Drives the worker until the listener sent a kClose frame (it drops this
  // peer) or the endpoint failed, or 10 s pass; returns whether either came.
  bool WaitForClose() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto closed = [this] {
      for (const std::string& m : received_) {
        if (m.size() >= kFrameBytes &&
            static_cast<FrameKind>(m[4]) == FrameKind::kClose) {
          return true;
        }
      }
      return error_ != UCS_OK;
    };
    while (!closed() && std::chrono::steady_clock::now() < deadline) Drive();
    return closed();
  }

  // Drives the worker until the endpoint reports an error or 10 s pass;
  // returns the error (UCS_OK when none came).
  ucs_status_t WaitForError() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (error_ == UCS_OK && std::chrono::steady_clock::now() < deadline) {
      Drive();
    }
    return error_;
  }

 private:
  void Drive() {
    while (ucp_worker_progress(worker_.get()) != 0) {
    }
    int fd = -1;
    if (ucp_worker_get_efd(worker_.get(), &fd) == UCS_OK &&
        ucp_worker_arm(worker_.get()) == UCS_OK) {
      pollfd pfd{fd, POLLIN, 0};
      poll(&pfd, 1, 50);
    }
  }

  ucs_status_t Wait(ucs_status_ptr_t req) {
    if (req == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    ucs_status_t st;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < deadline) {
      Drive();
    }
    ucp_request_free(req);
    return st;
  }

  std::shared_ptr<transport_internal::UcxContext> context_;
  transport_internal::WorkerPtr worker_;
  ucp_ep_h ep_ = nullptr;
  ucs_status_t error_ = UCS_OK;
  std::vector<std::string> received_;
};

std::string FrameBytes(const Frame& f) {
  std::string out(kFrameBytes, '\0');
  EncodeFrame(f, out.data());
  return out;
}

class UcxTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = NewUcxTransport();
    ASSERT_TRUE(t.ok()) << t.status();
    transport_ = std::move(*t);
    auto l = transport_->Listen("ucx:", &handler_);
    ASSERT_TRUE(l.ok()) << l.status();
    listener_ = std::move(*l);
  }

  // The listener still serves a well-behaved client.
  void ExpectStillServing() {
    auto conn = transport_->Connect(listener_->address());
    ASSERT_TRUE(conn.ok()) << conn.status();
    Result<Message> r = (*conn)->CallSync(9, "still", "here");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->header, "still");
    EXPECT_EQ(r->payload.view(), "here");
  }

  CountingEcho handler_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
};

TEST_F(UcxTransportTest, GarbageHeaderClosesOnlyThatConnection) {
  RawPeer peer;
  ASSERT_NO_FATAL_FAILURE(peer.ConnectAndHello(listener_->address()));
  std::mt19937 rng(7);
  std::string junk(40, '\0');
  for (char& c : junk) c = static_cast<char>(rng());
  EXPECT_EQ(peer.Send(junk, "data", /*rndv=*/false), UCS_OK);
  EXPECT_TRUE(peer.WaitForClose());
  EXPECT_EQ(handler_.requests(), 0);
  ExpectStillServing();
}

TEST_F(UcxTransportTest, InconsistentLengthsCloseTheConnection) {
  RawPeer peer;
  ASSERT_NO_FATAL_FAILURE(peer.ConnectAndHello(listener_->address()));
  Frame f;
  f.kind = FrameKind::kRequest;
  f.header_len = 100;  // only 3 header bytes follow
  f.payload_len = 4;
  EXPECT_EQ(peer.Send(FrameBytes(f) + "abc", "data", false), UCS_OK);
  EXPECT_TRUE(peer.WaitForClose());
  EXPECT_EQ(handler_.requests(), 0);
  ExpectStillServing();
}

TEST_F(UcxTransportTest, MalformedRendezvousIsRefusedAndClosed) {
  RawPeer peer;
  ASSERT_NO_FATAL_FAILURE(peer.ConnectAndHello(listener_->address()));
  Frame f;
  f.kind = FrameKind::kRequest;
  f.payload_len = 12;  // but 1 MiB arrives
  std::string data(1 << 20, 'x');
  ucs_status_t sent = peer.Send(FrameBytes(f), data, /*rndv=*/true);
  EXPECT_NE(sent, UCS_OK);  // the listener refused the data
  EXPECT_TRUE(peer.WaitForClose());
  EXPECT_EQ(handler_.requests(), 0);
  ExpectStillServing();
}

TEST_F(UcxTransportTest, ReplyFrameSentToListenerClosesTheConnection) {
  RawPeer peer;
  ASSERT_NO_FATAL_FAILURE(peer.ConnectAndHello(listener_->address()));
  Frame f;
  f.kind = FrameKind::kReply;
  f.request_id = 1;
  EXPECT_EQ(peer.Send(FrameBytes(f), "", false), UCS_OK);
  EXPECT_TRUE(peer.WaitForClose());
  EXPECT_EQ(handler_.requests(), 0);
  ExpectStillServing();
}

// A well-formed request: header "hi", payload "data".
Frame HiRequest() {
  Frame f;
  f.kind = FrameKind::kRequest;
  f.request_id = 1;
  f.header_len = 2;
  f.payload_len = 4;
  return f;
}

TEST_F(UcxTransportTest, WellFormedRawRequestIsServed) {
  // Guards the tests above: the raw peer itself is able to talk.
  RawPeer peer;
  ASSERT_NO_FATAL_FAILURE(peer.ConnectAndHello(listener_->address()));
  const Frame f = HiRequest();
  EXPECT_EQ(peer.Send(FrameBytes(f) + "hi", "data", false), UCS_OK);
  Frame want = f;
  want.kind = FrameKind::kReply;
  EXPECT_EQ(peer.WaitForMessage(), FrameBytes(want) + "hi");
  EXPECT_EQ(handler_.requests(), 1);
}

TEST_F(UcxTransportTest, FramesBeforeTheHelloNeverReachTheHandler) {
  // A peer that connects to the worker's address but skips the handshake:
  // its requests are dropped, and the listener goes on serving.
  RawPeer peer;
  ASSERT_NO_FATAL_FAILURE(peer.Connect(listener_->address()));
  const Frame f = HiRequest();
  EXPECT_EQ(peer.Send(FrameBytes(f) + "hi", "data", false), UCS_OK);
  std::string junk(40, '\x5a');
  EXPECT_EQ(peer.Send(junk, "data", false), UCS_OK);
  ExpectStillServing();
  EXPECT_EQ(handler_.requests(), 1);  // ExpectStillServing's own call
}

TEST(UcxConnectTest, MalformedWorkerAddressesAreInvalidArgument) {
  auto t = NewUcxTransport();
  ASSERT_TRUE(t.ok()) << t.status();
  for (const char* bad :
       {"127.0.0.1:7700", "ucx:", "ucx:abc", "ucx:zz", "UCX:00"}) {
    EXPECT_EQ((*t)->Connect(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ((*t)->Connect("ucx:" + std::string(40000, '0')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(UcxConnectTest, ListenerThatNeverAnswersTimesOutWithUnavailable) {
  // A bare UCX worker that is never progressed: UCX's own connection to it
  // is accepted by the kernel, but the handshake is never answered.
  auto ctx = transport_internal::UcxContext::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto worker = transport_internal::CreateWorker(**ctx);
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto bytes = transport_internal::WorkerAddress(worker->get());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string address = transport_internal::EncodeWorkerAddress(*bytes);

  UcxTransportOptions options;
  options.connect_timeout = std::chrono::milliseconds(300);
  options.close_timeout = std::chrono::milliseconds(300);
  auto t = NewUcxTransport(options);
  ASSERT_TRUE(t.ok()) << t.status();
  auto start = std::chrono::steady_clock::now();
  auto conn = (*t)->Connect(address);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kUnavailable)
      << conn.status();
  EXPECT_NE(
      conn.status().message().find(transport_internal::WorkerLabel(*bytes)),
      std::string::npos)
      << conn.status();
  EXPECT_LT(took, std::chrono::seconds(3));
}

TEST(UcxAdmissionTest, PullsBeyondTheInflightLimitWaitAndComplete) {
  UcxTransportOptions options;
  options.max_inflight_pull_bytes = 1 << 20;  // one 3 MiB pull at a time
  auto t = NewUcxTransport(options);
  ASSERT_TRUE(t.ok()) << t.status();
  CountingEcho handler;
  auto listener = (*t)->Listen("ucx:", &handler);
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto conn = (*t)->Connect((*listener)->address());
  ASSERT_TRUE(conn.ok()) << conn.status();

  constexpr int kCalls = 6;
  std::vector<std::string> payloads;
  std::mt19937 rng(11);
  for (int i = 0; i < kCalls; ++i) {
    std::string p(3 << 20, '\0');
    for (char& c : p) c = static_cast<char>(rng());
    payloads.push_back(std::move(p));
  }
  absl::BlockingCounter done(kCalls);
  absl::Mutex mu;
  int good = 0;
  for (int i = 0; i < kCalls; ++i) {
    (*conn)->Call(1, std::to_string(i), payloads[i], [&, i](Result<Message> r) {
      absl::MutexLock l(&mu);
      if (r.ok() && r->payload.view() == payloads[i] &&
          r->header == std::to_string(i)) {
        ++good;
      }
      done.DecrementCount();
    });
  }
  done.Wait();
  EXPECT_EQ(good, kCalls);
  EXPECT_EQ(handler.requests(), kCalls);
}

// Records where each received payload sits in its allocation.
class HeadroomProbe : public RequestHandler {
 public:
  void OnRequest(Message request,
                 std::unique_ptr<ReplyChannel> reply) override {
    const Buffer& b = request.payload;
    const auto base = reinterpret_cast<uintptr_t>(b.data()) - b.headroom();
    std::string facts =
        absl::StrCat(b.headroom(), " ", base % Buffer::kAlignment, " ",
                     (b.headroom() + b.capacity()) % Buffer::kAlignment);
    reply->Send(1, facts, std::move(request.payload));
  }
};

TEST(UcxHeadroomTest, PulledPayloadsLeaveTheAskedRoomInFront) {
  auto t = NewUcxTransport();
  ASSERT_TRUE(t.ok()) << t.status();
  HeadroomProbe handler;
  ListenOptions lo;
  lo.payload_headroom = 64;
  auto listener = (*t)->Listen("ucx:", &handler, lo);
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto conn = (*t)->Connect((*listener)->address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  std::string payload(1 << 20, '\0');
  std::mt19937 rng(3);
  for (char& c : payload) c = static_cast<char>(rng());
  auto r = (*conn)->CallSync(1, "h", payload);
  ASSERT_TRUE(r.ok()) << r.status();
  // 64 bytes of headroom, an aligned allocation, a whole number of blocks,
  // and the bytes themselves intact.
  EXPECT_EQ(r->header, "64 0 0");
  EXPECT_EQ(r->payload.view(), payload);
}

// UcxTransportTest's echo listener and a connection to it.
class UcxCallIntoTest : public UcxTransportTest {
 protected:
  void SetUp() override {
    UcxTransportTest::SetUp();
    ASSERT_NE(listener_, nullptr);
    auto c = transport_->Connect(listener_->address());
    ASSERT_TRUE(c.ok()) << c.status();
    conn_ = std::move(*c);
  }
  std::unique_ptr<Connection> conn_;
};

// CallInto: a rendezvous reply the caller accepts lands in its memory (the
// reply borrows it, nothing copied after); one of another length, one it
// refuses by header, and an eager one arrive in transport buffers, and the
// caller's memory is left alone.
TEST_F(UcxCallIntoTest, AcceptedRendezvousRepliesLandInTheCallersMemory) {
  std::mt19937 rng(5);
  auto pattern = [&rng](size_t n) {
    std::string p(n, '\0');
    for (char& c : p) c = static_cast<char>(rng());
    return p;
  };
  struct Case {
    std::string header;
    size_t payload;
    size_t into;
    bool landed;
  };
  const Case cases[] = {{"take", 3 << 20, 3 << 20, true},
                        {"take", 3 << 20, 4 << 20, false},
                        {"refuse", 3 << 20, 3 << 20, false},
                        {"take", 1000, 1000, false}};  // eager
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.header, " ", c.payload, " into ", c.into));
    const std::string payload = pattern(c.payload);
    std::string dest(c.into, 'x');
    std::string seen;
    absl::Notification done;
    Result<Message> reply = absl::UnknownError("no reply");
    ReplyInto into;
    into.data = dest.data();
    into.size = dest.size();
    into.accept = [&seen](std::string_view h) {
      seen = std::string(h);
      return h == "take";
    };
    conn_->CallInto(
        1, c.header, payload,
        [&](Result<Message> r) {
          reply = std::move(r);
          done.Notify();
        },
        std::move(into));
    done.WaitForNotification();
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->payload.view(), payload);
    EXPECT_EQ(reply->payload.borrowed(), c.landed);
    if (c.landed) {
      EXPECT_EQ(reply->payload.data(), dest.data());
      EXPECT_EQ(dest, payload);
    } else {
      EXPECT_EQ(dest, std::string(c.into, 'x'));
    }
    // Asked only when the length fits, and with the reply's header.
    EXPECT_EQ(seen, c.payload == c.into && c.payload >= (64 << 10)
                        ? c.header
                        : std::string());
  }
}

// A connection lost while a reply is being pulled into the caller's memory
// finishes the call only once the pull has ended.
TEST_F(UcxCallIntoTest, ListenerGoneMidReplyFailsTheCallAfterThePull) {
  constexpr int kCalls = 8;
  const std::string payload(8 << 20, 'p');
  std::vector<std::string> dests(kCalls, std::string(payload.size(), 'x'));
  absl::BlockingCounter done(kCalls);
  std::atomic<int> ok{0}, failed{0};
  for (int i = 0; i < kCalls; ++i) {
    ReplyInto into{dests[i].data(), dests[i].size(), nullptr};
    conn_->CallInto(
        1, "h", payload,
        [&, i](Result<Message> r) {
          if (r.ok() && r->payload.view() == payload) {
            ++ok;
          } else if (!r.ok() && absl::IsUnavailable(r.status())) {
            ++failed;
          }
          done.DecrementCount();
        },
        std::move(into));
  }
  listener_.reset();  // goes away with replies in flight
  done.Wait();
  EXPECT_EQ(ok + failed, kCalls);
}

TEST(BufferTest, WithHeadroomPlacesBytesAfterTheRoom) {
  Buffer b = Buffer::WithHeadroom(5000, 64);
  EXPECT_EQ(b.size(), 5000u);
  EXPECT_EQ(b.headroom(), 64u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data() - 64) % Buffer::kAlignment,
            0u);
  EXPECT_EQ(b.headroom() + b.capacity(), 8192u);
  Buffer moved = std::move(b);
  EXPECT_EQ(moved.headroom(), 64u);
  EXPECT_EQ(b.headroom(), 0u);
  Buffer plain(100);
  EXPECT_EQ(plain.headroom(), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plain.data()) % Buffer::kAlignment, 0u);
}

// Answers each request with the listener's id for the connection it came
// on.
class PeerEcho : public RequestHandler {
 public:
  void OnRequest(Message request,
                 std::unique_ptr<ReplyChannel> reply) override {
    reply->Send(request.op, std::to_string(request.peer), Buffer());
  }
};

TEST(UcxSharedConnectTest, CallersOfConnectSharedShareOneConnection) {
  auto t = NewUcxTransport();
  ASSERT_TRUE(t.ok()) << t.status();
  PeerEcho handler;
  auto listener = (*t)->Listen("ucx:", &handler);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const std::string addr = (*listener)->address();
  // The listener's id for the caller: its endpoint and its flow.
  auto peer_of = [](Connection& c) -> uint64_t {
    Result<Message> r = c.CallSync(1, "", "");
    EXPECT_TRUE(r.ok()) << r.status();
    uint64_t peer = 0;
    EXPECT_TRUE(r.ok() && absl::SimpleAtoi(r->header, &peer));
    return peer;
  };
  using transport_internal::EndpointOf;
  auto a = (*t)->ConnectShared(addr);
  auto b = (*t)->ConnectShared(addr);
  auto c = (*t)->Connect(addr);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const uint64_t pa = peer_of(**a), pb = peer_of(**b), pc = peer_of(**c);
  // a and b: one endpoint, two flows (the admission tells them apart).
  EXPECT_EQ(EndpointOf(pa), EndpointOf(pb));
  EXPECT_NE(pa, pb);
  EXPECT_NE(EndpointOf(pc), EndpointOf(pa));
  // One sharer gone, the other still talks on the same connection.
  a->reset();
  EXPECT_EQ(peer_of(**b), pb);
  // All gone: the next ConnectShared is a new connection.
  b->reset();
  auto d = (*t)->ConnectShared(addr);
  ASSERT_TRUE(d.ok()) << d.status();
  const uint64_t pd = peer_of(**d);
  EXPECT_NE(EndpointOf(pd), EndpointOf(pa));
  EXPECT_NE(EndpointOf(pd), EndpointOf(pc));
}

}  // namespace
}  // namespace stagger::transport
