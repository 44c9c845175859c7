// Request handlers and helpers the transport tests share: the two
// transports a behaviour runs over, random payloads, and handlers that echo
// or park what they receive.
#ifndef STAGGER_TRANSPORT_TESTING_HANDLERS_H_
#define STAGGER_TRANSPORT_TESTING_HANDLERS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "transport/transport.h"

namespace stagger::testutil {

// Which Transport a parameterized test runs over.
enum class TransportKind { kUcx, kInProc };

inline void PrintTo(TransportKind kind, std::ostream* os) {
  *os << (kind == TransportKind::kUcx ? "Ucx" : "InProc");
}

// `n` bytes drawn from a generator seeded with `seed`.
inline std::string Pattern(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Replies with the request's op + 1, its header and its payload, and keeps
// the thread, header and peer of every request it was given.
class EchoHandler : public transport::RequestHandler {
 public:
  void OnRequest(transport::Message request,
                 std::unique_ptr<transport::ReplyChannel> reply) override {
    {
      absl::MutexLock l(&mu_);
      handler_threads_.push_back(std::this_thread::get_id());
      headers_.push_back(request.header);
      peers_.push_back(request.peer);
    }
    reply->Send(request.op + 1, std::move(request.header),
                std::move(request.payload));
  }
  std::vector<std::thread::id> handler_threads() {
    absl::MutexLock l(&mu_);
    return handler_threads_;
  }
  std::vector<std::string> headers() {
    absl::MutexLock l(&mu_);
    return headers_;
  }
  std::vector<uint64_t> peers() {
    absl::MutexLock l(&mu_);
    return peers_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::thread::id> handler_threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> headers_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> peers_ ABSL_GUARDED_BY(mu_);
};

// Keeps requests and their reply channels for the test to look at and
// answer.
class ParkingHandler : public transport::RequestHandler {
 public:
  struct Parked {
    transport::Message request;
    std::unique_ptr<transport::ReplyChannel> reply;
  };
  void OnRequest(transport::Message request,
                 std::unique_ptr<transport::ReplyChannel> reply) override {
    absl::MutexLock l(&mu_);
    parked_.push_back({std::move(request), std::move(reply)});
  }
  // Waits until `n` requests are parked, or `timeout` has passed, and takes
  // what is parked: fewer than `n` only after the timeout.
  std::deque<Parked> Take(size_t n,
                          absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock l(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return parked_.size() >= n;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    std::deque<Parked> out;
    out.swap(parked_);
    return out;
  }

 private:
  absl::Mutex mu_;
  std::deque<Parked> parked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::testutil

#endif  // STAGGER_TRANSPORT_TESTING_HANDLERS_H_
