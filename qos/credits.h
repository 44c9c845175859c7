// CreditLedger: the server's admission accounting. Every byte a client may
// have in flight to the server (received, not yet durable) is backed by
// credit from one budget, so that the server's disk queue and memory stay
// bounded however many ranks send at once (docs/design.md §5, §6.2).
//
// The asynchronous form of "may N bytes go now, at this priority"
// (qos/rate_limiter.h): the answer is a callback, for the server's transport
// threads, which must not block.
//
// Grant order, each time credit is free:
//   1. by Priority: restore before any checkpoint, checkpoint before any
//      background request (strict priority);
//   2. within a priority, the client with the fewest bytes in flight (max-min
//      fairness), ties to the oldest request; each client's own requests in
//      FIFO order.
// The chosen request is granted when it fits the free budget; if it does
// not, nothing else is granted until it does (no starvation of large
// requests behind small ones). A request larger than the whole budget is
// granted when nothing else is in flight, so the ledger never deadlocks.
//
// Invariants: in_flight_bytes() is the sum of the clients' in-flight bytes;
// it exceeds the budget only while a single oversized grant is out.
//
// Thread-safety: thread-safe. Callbacks run without the ledger's lock held,
// so they may call back into the ledger.
#ifndef STAGGER_QOS_CREDITS_H_
#define STAGGER_QOS_CREDITS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "qos/rate_limiter.h"
#include "stagger/status.h"

namespace stagger::qos {

// The server's identifier of a client (its session id).
using ClientId = uint64_t;

class CreditLedger {
 public:
  // Runs once per request: OK when granted (the bytes then count as in
  // flight for the client until Release), CANCELLED when the client is
  // removed or the ledger destroyed first.
  using GrantCallback = absl::AnyInvocable<void(Status)>;

  explicit CreditLedger(uint64_t budget_bytes);
  // Answers every queued request with CANCELLED.
  ~CreditLedger();
  CreditLedger(const CreditLedger&) = delete;
  CreditLedger& operator=(const CreditLedger&) = delete;

  // Queues a request for `bytes` of credit. `done` may run before Request
  // returns, on the calling thread, when the credit is free at once.
  void Request(ClientId client, Priority priority, uint64_t bytes,
               GrantCallback done);

  // Returns `bytes` of the client's credit and grants queued requests.
  // FAILED_PRECONDITION (and all the client's credit returned) when the
  // client has fewer bytes in flight.
  Status Release(ClientId client, uint64_t bytes);

  // Forgets a client (it disconnected): its queued requests are answered
  // with CANCELLED and its in-flight credit returned.
  void RemoveClient(ClientId client);

  uint64_t budget_bytes() const { return budget_bytes_; }
  uint64_t in_flight_bytes() const;
  uint64_t in_flight_bytes(ClientId client) const;
  // Requests queued, in total or for one client.
  size_t queue_depth() const;
  size_t queue_depth(ClientId client) const;

 private:
  struct Pending {
    uint64_t seq;
    uint64_t bytes;
    GrantCallback done;
  };
  struct ClientState {
    uint64_t in_flight = 0;
    std::deque<Pending> queue[kPriorities];  // indexed by Priority
  };

  // Grants what the order above allows; appends the callbacks to run.
  void GrantLocked(std::vector<GrantCallback>* granted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseIfIdleLocked(ClientId client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t budget_bytes_;
  mutable absl::Mutex mu_;
  std::map<ClientId, ClientState> clients_ ABSL_GUARDED_BY(mu_);
  uint64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  size_t queued_[kPriorities] ABSL_GUARDED_BY(mu_) = {};
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stagger::qos

#endif  // STAGGER_QOS_CREDITS_H_
