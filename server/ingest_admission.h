// IngestAdmission: the server's admission control (docs/design.md §5). One
// qos::CreditLedger, one budget of bytes, covers everything a client has
// in flight inside the server:
//
//   - checkpoint payloads, as the transport's PullAdmission: the listener
//     asks before it pulls a rendezvous payload (CHECKPOINT class), and the
//     bytes stay charged until the payload Buffer is destroyed, i.e. after
//     the segment store has written it (or the request failed);
//   - restore reads: DataService reserves a GetChunk's record bytes in the
//     RESTORE class before reading and releases them after the reply is
//     sent, so that queued checkpoint pulls wait behind reads.
//
// The ledger decides the order (qos/credits.h): RESTORE before CHECKPOINT,
// then the client with the fewest bytes in flight. A client is one
// connection (Message::peer). A request larger than the whole budget is
// granted when nothing else is in flight, so no chunk size deadlocks.
//
// A peer that disconnects (PeerGone) keeps its charged bytes until its
// buffers are written (the bound keeps covering them); its queued requests
// are granted to nobody: each grant that still comes goes straight back,
// and once its last byte is released the ledger forgets it, cancelling
// whatever it still had queued.
//
// Thread-safety: thread-safe. Grants run on whichever thread freed the
// credit (or inside the request) with no lock held; they must not block.
// Releasing from inside a grant is fine: the ledger calls are trampolined
// per thread, so a chain of grants given back at once does not recurse.
#ifndef STAGGER_SERVER_INGEST_ADMISSION_H_
#define STAGGER_SERVER_INGEST_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "qos/credits.h"
#include "transport/transport.h"

namespace stagger::server {

// A snapshot of the admission books (for logs and, later, the metrics
// endpoint).
struct AdmissionStats {
  struct Client {
    uint64_t in_flight_bytes = 0;  // granted, not yet released
    size_t queued = 0;             // requests waiting for credit
  };
  uint64_t budget_bytes = 0;
  uint64_t in_flight_bytes = 0;    // credit in use, all clients
  size_t queue_depth = 0;          // requests waiting, both classes
  size_t restore_queue_depth = 0;  // of which restore reads
  uint64_t checkpoint_grants = 0;  // since start
  uint64_t restore_grants = 0;
  // Clients (connection ids) with credit or requests; idle ones are left
  // out.
  std::map<uint64_t, Client> clients;
};

class IngestAdmission final : public transport::PullAdmission {
 public:
  // `budget_bytes` > 0.
  explicit IngestAdmission(uint64_t budget_bytes);
  // Requests still queued are dropped (their grants never run).
  ~IngestAdmission() override;
  IngestAdmission(const IngestAdmission&) = delete;
  IngestAdmission& operator=(const IngestAdmission&) = delete;

  // transport::PullAdmission: a checkpoint payload from `peer`.
  void Request(uint64_t peer, size_t bytes,
               std::function<void()> grant) override;
  void Release(uint64_t peer, size_t bytes) override;
  void PeerGone(uint64_t peer) override;

  // A restore read of `bytes` for `peer`: `grant` runs once the bytes are
  // reserved (possibly inside the call); give them back with Release().
  // Dropped (grant destroyed unrun) when `peer` is already gone.
  void RequestRestore(uint64_t peer, uint64_t bytes,
                      std::function<void()> grant);

  uint64_t budget_bytes() const { return budget_bytes_; }
  // The admission's own books; they run a call ahead of the ledger (a
  // release is booked just before the ledger frees the credit).
  AdmissionStats Stats() const;
  // Wait until at least `n` requests are queued, or until no credit is in
  // use and nothing is queued, as the ledger sees it too (no ledger call in
  // progress); false on timeout.
  bool AwaitQueueDepth(size_t n, absl::Duration timeout) const;
  bool AwaitIdle(absl::Duration timeout) const;

 private:
  struct Peer {
    uint64_t charged = 0;
    size_t queued[qos::kPriorities] = {};  // by qos::Priority
    bool gone = false;
  };
  struct LedgerOp;

  void Ask(uint64_t peer, qos::Priority priority, uint64_t bytes,
           std::function<void()> grant);
  void OnAnswer(uint64_t peer, int cls, uint64_t bytes, const Status& status,
                std::function<void()>& grant);
  // Erases the peer's entry when nothing refers to it any more.
  void EraseIfIdleLocked(std::map<uint64_t, Peer>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a Release or RemoveClient on the ledger; nested calls on the same
  // thread (from inside grants) are queued and run by the outermost one.
  void RunOnLedger(const LedgerOp& op);

  const uint64_t budget_bytes_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Peer> peers_ ABSL_GUARDED_BY(mu_);
  uint64_t charged_ ABSL_GUARDED_BY(mu_) = 0;
  size_t queued_[qos::kPriorities] ABSL_GUARDED_BY(mu_) = {};
  uint64_t grants_[qos::kPriorities] ABSL_GUARDED_BY(mu_) = {};
  // Ledger calls in progress, whose effect the books show already (or, for
  // a Request, not yet): the waits hold off while any runs.
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  // Last: destroyed first, while the books its callbacks touch still exist.
  qos::CreditLedger ledger_;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_INGEST_ADMISSION_H_
