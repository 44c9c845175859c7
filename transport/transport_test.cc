// Behaviour every Transport shares, run over UCX and the in-process one.
#include "transport/transport.h"

#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "transport/inproc_transport.h"
#include "transport/internal/ucx_handles.h"
#include "transport/testing/handlers.h"
#include "transport/ucx_transport.h"

namespace stagger::transport {
namespace {

using Kind = testutil::TransportKind;
using testutil::EchoHandler;
using testutil::ParkingHandler;
using testutil::Pattern;

// Drops every request's reply channel without replying.
class DroppingHandler : public RequestHandler {
 public:
  void OnRequest(Message, std::unique_ptr<ReplyChannel>) override {}
};

class TransportTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kUcx) {
      UcxTransportOptions options;
      options.connect_timeout = std::chrono::seconds(5);
      auto t = NewUcxTransport(options);
      ASSERT_TRUE(t.ok()) << t.status();
      transport_ = std::move(*t);
    } else {
      transport_ = NewInProcTransport();
    }
  }

  std::string AnyAddress() const {
    return GetParam() == Kind::kUcx ? "ucx:" : "inproc:";
  }

  std::unique_ptr<Listener> MustListen(RequestHandler* handler) {
    auto l = transport_->Listen(AnyAddress(), handler);
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? std::move(*l) : nullptr;
  }

  std::unique_ptr<Connection> MustConnect(const Listener& listener) {
    auto c = transport_->Connect(listener.address());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  void ExpectEcho(Connection& conn, uint16_t op, const std::string& header,
                  const std::string& payload) {
    Result<Message> reply = conn.CallSync(op, header, payload);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->op, op + 1);
    EXPECT_EQ(reply->header, header);
    ASSERT_EQ(reply->payload.size(), payload.size());
    EXPECT_TRUE(reply->payload.view() == payload) << "payload differs";
    if (!payload.empty()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(reply->payload.data()) %
                    Buffer::kAlignment,
                0u);
    }
  }

  std::unique_ptr<Transport> transport_;
};

TEST_P(TransportTest, EchoesSmallMessageExactly) {
  EchoHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  ExpectEcho(*conn, 7, "small header", Pattern(1000, 1));
  ExpectEcho(*conn, 0, "", "");
  EXPECT_EQ(conn->peer(), listener->address());
}

TEST_P(TransportTest, EchoesLargePayloadExactly) {
  EchoHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  ExpectEcho(*conn, 1, "large", Pattern(8 << 20, 2));  // rendezvous
  ExpectEcho(*conn, 2, "at threshold", Pattern(64 << 10, 3));
  ExpectEcho(*conn, 3, "just below", Pattern((64 << 10) - 1, 4));
}

TEST_P(TransportTest, EchoesLargestHeaderWithSmallAndLargePayload) {
  EchoHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  // Larger than UCX's AM header limit with sm,tcp: exercises the path where
  // the header travels with the data.
  const std::string header = Pattern(kMaxHeaderBytes, 5);
  ExpectEcho(*conn, 4, header, Pattern(100, 6));
  ExpectEcho(*conn, 5, header, Pattern(1 << 20, 7));
  ExpectEcho(*conn, 6, header, "");
  // Just below that limit: the header rides in the AM header, also in a
  // rendezvous request.
  const std::string inline_header = Pattern(8000, 8);
  ExpectEcho(*conn, 7, inline_header, Pattern(10, 9));
  ExpectEcho(*conn, 8, inline_header, Pattern(2 << 20, 10));
}

TEST_P(TransportTest, OversizedHeaderIsInvalidArgument) {
  EchoHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  Result<Message> r =
      conn->CallSync(1, std::string(kMaxHeaderBytes + 1, 'h'), "x");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(handler.handler_threads().empty());
  // The connection stays usable.
  ExpectEcho(*conn, 2, "after", "ok");
}

TEST_P(TransportTest, ManyConcurrentCallsFromSeveralThreads) {
  EchoHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);

  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 100;
  // Payloads stay alive until every call completed (they are borrowed).
  std::vector<std::string> payloads(kThreads * kCallsPerThread);
  for (size_t i = 0; i < payloads.size(); ++i) {
    size_t size = (i % 10 == 0) ? (200 << 10) : (i * 37) % 5000;
    payloads[i] = Pattern(size, 100 + i);
  }
  absl::BlockingCounter remaining(kThreads * kCallsPerThread);
  absl::Mutex mu;
  int mismatches = 0;
  int failures = 0;
  std::vector<std::thread::id> callback_threads;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        const size_t n = t * kCallsPerThread + i;
        const std::string header = std::to_string(n);
        conn->Call(static_cast<uint16_t>(n % 1000), header, payloads[n],
                   [&, n, header](Result<Message> r) {
                     absl::MutexLock l(&mu);
                     callback_threads.push_back(std::this_thread::get_id());
                     if (!r.ok()) {
                       ++failures;
                     } else if (r->header != header || r->op != n % 1000 + 1 ||
                                r->payload.view() != payloads[n]) {
                       ++mismatches;
                     }
                     remaining.DecrementCount();
                   });
      }
    });
  }
  for (auto& th : threads) th.join();
  remaining.Wait();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(handler.handler_threads().size(),
            static_cast<size_t>(kThreads * kCallsPerThread));
  for (const auto& id : callback_threads) {
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST_P(TransportTest, RepliesSentLaterFromAnotherThreadInAnyOrder) {
  ParkingHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);

  constexpr int kCalls = 8;
  std::vector<std::string> payloads;
  for (int i = 0; i < kCalls; ++i) payloads.push_back(Pattern(i * 30000, i));
  std::vector<Result<Message>> results;
  for (int i = 0; i < kCalls; ++i) results.emplace_back(absl::UnknownError(""));
  absl::BlockingCounter done(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    conn->Call(10, std::to_string(i), payloads[i], [&, i](Result<Message> r) {
      results[i] = std::move(r);
      done.DecrementCount();
    });
  }
  std::deque<ParkingHandler::Parked> parked = handler.Take(kCalls);
  ASSERT_EQ(parked.size(), static_cast<size_t>(kCalls));
  // Answer from a thread that is neither the caller nor the transport's,
  // last request first; the reply carries the request's header reversed.
  std::thread replier([&] {
    for (auto it = parked.rbegin(); it != parked.rend(); ++it) {
      std::string h(it->request.header.rbegin(), it->request.header.rend());
      h += "-reply";
      it->reply->Send(20, std::move(h), std::move(it->request.payload));
    }
  });
  replier.join();
  done.Wait();
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->op, 20);
    std::string want = std::to_string(i);
    want = std::string(want.rbegin(), want.rend()) + "-reply";
    EXPECT_EQ(results[i]->header, want);
    EXPECT_TRUE(results[i]->payload.view() == payloads[i]) << i;
  }
}

TEST_P(TransportTest, SentRunsOnceThePayloadLeftBeforeTheReply) {
  ParkingHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  // Eager and rendezvous payloads.
  const std::vector<std::string> payloads = {Pattern(1000, 1),
                                             Pattern(4 << 20, 2)};
  for (const std::string& payload : payloads) {
    absl::Notification sent, replied;
    std::atomic<int> sent_calls{0};
    bool sent_before_reply = false;
    conn->Call(
        5, "h", payload,
        [&](Result<Message> r) {
          EXPECT_TRUE(r.ok()) << r.status();
          sent_before_reply = sent.HasBeenNotified();
          replied.Notify();
        },
        [&] {
          ++sent_calls;
          sent.Notify();
        });
    // The request is parked, unanswered: the payload has left all the
    // same, and the sender hears so without waiting for the reply.
    std::deque<ParkingHandler::Parked> parked = handler.Take(1);
    ASSERT_EQ(parked.size(), 1u);
    EXPECT_TRUE(sent.WaitForNotificationWithTimeout(absl::Seconds(10)))
        << payload.size();
    EXPECT_FALSE(replied.HasBeenNotified());
    parked.front().reply->Send(6, "", Buffer());
    ASSERT_TRUE(replied.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_TRUE(sent_before_reply);
    EXPECT_EQ(sent_calls.load(), 1);
  }
}

TEST_P(TransportTest, HandlerDroppingTheReplyChannelGivesUnavailable) {
  DroppingHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  Result<Message> r = conn->CallSync(1, "h", "p");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("without replying"), std::string::npos)
      << r.status();
}

TEST_P(TransportTest, CallAfterListenerWentAwayIsUnavailable) {
  EchoHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  ExpectEcho(*conn, 1, "before", "x");
  const std::string address = listener->address();
  listener.reset();
  Result<Message> r = conn->CallSync(1, "after", "y");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  // And nobody can connect to the old address any more.
  auto again = transport_->Connect(address);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
}

TEST_P(TransportTest, InFlightCallFailsWhenListenerGoesAndLateReplyIsDropped) {
  ParkingHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  absl::Notification done;
  Result<Message> result = absl::UnknownError("unset");
  conn->Call(1, "h", "p", [&](Result<Message> r) {
    result = std::move(r);
    done.Notify();
  });
  std::deque<ParkingHandler::Parked> parked = handler.Take(1);
  ASSERT_EQ(parked.size(), 1u);
  listener.reset();
  done.WaitForNotification();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  // Replying on a channel whose listener is gone is a silent no-op.
  parked.front().reply->Send(2, "late", Buffer::CopyOf("late"));
  parked.clear();
}

TEST_P(TransportTest, DestroyingConnectionFailsPendingCalls) {
  ParkingHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  absl::Notification done;
  Result<Message> result = absl::UnknownError("unset");
  conn->Call(1, "h", "p", [&](Result<Message> r) {
    result = std::move(r);
    done.Notify();
  });
  std::deque<ParkingHandler::Parked> parked = handler.Take(1);
  ASSERT_EQ(parked.size(), 1u);
  conn.reset();
  ASSERT_TRUE(done.HasBeenNotified());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  // The server replies to a requester that is gone: dropped, and the
  // listener keeps serving others.
  parked.front().reply->Send(2, "late", Buffer::CopyOf("late"));
  auto other = MustConnect(*listener);
  ASSERT_NE(other, nullptr);
  absl::Notification other_done;
  Result<Message> other_result = absl::UnknownError("unset");
  other->Call(3, "h2", "p2", [&](Result<Message> r) {
    other_result = std::move(r);
    other_done.Notify();
  });
  parked = handler.Take(1);
  ASSERT_EQ(parked.size(), 1u);
  parked.front().reply->Send(4, "fine", Buffer::CopyOf("p2"));
  other_done.WaitForNotification();
  ASSERT_TRUE(other_result.ok()) << other_result.status();
  EXPECT_EQ(other_result->header, "fine");
}

TEST_P(TransportTest, ConnectionMayBeDestroyedInsideItsReplyCallback) {
  EchoHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  absl::Notification done;
  Result<Message> result = absl::UnknownError("unset");
  Connection* raw = conn.get();
  raw->Call(1, "h", "p", [&](Result<Message> r) {
    result = std::move(r);
    conn.reset();  // shutdown finishes after this callback returns
    done.Notify();
  });
  done.WaitForNotification();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->header, "h");
  EXPECT_EQ(conn, nullptr);
  // The listener is unaffected.
  auto other = MustConnect(*listener);
  ASSERT_NE(other, nullptr);
  ExpectEcho(*other, 2, "other", "fine");
}

TEST_P(TransportTest, ConnectWhereNothingListensIsUnavailable) {
  std::string address;
  {
    // A port (or name) that was just free and that nothing listens on now.
    EchoHandler handler;
    auto listener = MustListen(&handler);
    ASSERT_NE(listener, nullptr);
    address = listener->address();
  }
  auto conn = transport_->Connect(address);
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kUnavailable)
      << conn.status();
  // UCX names the worker by a short label of its address.
  const std::string named =
      GetParam() == Kind::kUcx
          ? transport_internal::WorkerLabel(
                *transport_internal::DecodeWorkerAddress(address))
          : address;
  EXPECT_NE(conn.status().message().find(named), std::string::npos)
      << conn.status();
}

TEST_P(TransportTest, ListenOnAnyPortReportsTheBoundAddress) {
  EchoHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  const std::string address = listener->address();
  if (GetParam() == Kind::kUcx) {
    // The worker's address: "ucx:" and its bytes in hex.
    auto bytes = transport_internal::DecodeWorkerAddress(address);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_FALSE(bytes->empty());
  } else {
    EXPECT_GT(address.size(), kInProcScheme.size());
    EXPECT_EQ(address.substr(0, kInProcScheme.size()), kInProcScheme);
  }
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  ExpectEcho(*conn, 1, "resolved", "yes");
  // A second listener gets a different address.
  auto second = MustListen(&handler);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->address(), address);
}

TEST_P(TransportTest, ListeningOnAnotherListenersAddressIsRefused) {
  EchoHandler handler;
  auto first = MustListen(&handler);
  ASSERT_NE(first, nullptr);
  auto second = transport_->Listen(first->address(), &handler);
  // In-process names are taken; a UCX worker's address is its own.
  EXPECT_EQ(second.status().code(), GetParam() == Kind::kUcx
                                        ? absl::StatusCode::kInvalidArgument
                                        : absl::StatusCode::kUnavailable)
      << second.status();
  // The first listener is unaffected.
  auto conn = MustConnect(*first);
  ASSERT_NE(conn, nullptr);
  ExpectEcho(*conn, 1, "first", "still");
}

TEST_P(TransportTest, MalformedAddressesAreInvalidArgument) {
  EchoHandler handler;
  const std::string bad =
      GetParam() == Kind::kUcx ? "127.0.0.1" : "127.0.0.1:5";
  EXPECT_EQ(transport_->Listen(bad, &handler).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(transport_->Connect(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(transport_->Listen(AnyAddress(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(TransportTest, HandlersRunOffTheCallersThread) {
  EchoHandler handler;
  auto listener = MustListen(&handler);
  ASSERT_NE(listener, nullptr);
  auto conn = MustConnect(*listener);
  ASSERT_NE(conn, nullptr);
  std::thread::id callback_thread;
  absl::Notification done;
  conn->Call(1, "h", "p", [&](Result<Message> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    callback_thread = std::this_thread::get_id();
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_NE(callback_thread, std::this_thread::get_id());
  auto threads = handler.handler_threads();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(threads[0], std::this_thread::get_id());
}

INSTANTIATE_TEST_SUITE_P(All, TransportTest,
                         ::testing::Values(Kind::kUcx, Kind::kInProc),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kUcx ? "Ucx" : "InProc";
                         });

TEST(SplitHostPortTest, AcceptsHostAndPort) {
  auto a = SplitHostPort("127.0.0.1:8080");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(a->second, 8080);
  auto b = SplitHostPort("[::1]:0");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->first, "::1");
  EXPECT_EQ(b->second, 0);
  auto c = SplitHostPort("storage-1.example:65535");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->second, 65535);
}

TEST(SplitHostPortTest, RejectsMalformedTextNamingIt) {
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", ":80", "host:http",
                          "host:65536", "host:-1", "host:99999999999", "::1:80",
                          "[::1]80", "[::1:80", "host:8 0"}) {
    auto r = SplitHostPort(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("\"") + bad + "\""),
              std::string::npos)
        << r.status();
  }
}

}  // namespace
}  // namespace stagger::transport
