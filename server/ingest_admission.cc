#include "server/ingest_admission.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace stagger::server {
namespace {

constexpr int kRestore = static_cast<int>(qos::Priority::kRestore);
constexpr int kCheckpoint = static_cast<int>(qos::Priority::kCheckpoint);

}  // namespace

struct IngestAdmission::LedgerOp {
  qos::CreditLedger* ledger;
  uint64_t peer;
  uint64_t bytes;
  bool remove;  // RemoveClient instead of Release
};

IngestAdmission::IngestAdmission(uint64_t budget_bytes)
    : budget_bytes_(budget_bytes), ledger_(budget_bytes) {}

IngestAdmission::~IngestAdmission() = default;

void IngestAdmission::Request(uint64_t peer, size_t bytes,
                              std::function<void()> grant) {
  Ask(peer, qos::Priority::kCheckpoint, bytes, std::move(grant));
}

void IngestAdmission::RequestRestore(uint64_t peer, uint64_t bytes,
                                     std::function<void()> grant) {
  Ask(peer, qos::Priority::kRestore, bytes, std::move(grant));
}

void IngestAdmission::Ask(uint64_t peer, qos::Priority priority, uint64_t bytes,
                          std::function<void()> grant) {
  const int c = static_cast<int>(priority);
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    if (it != peers_.end() && it->second.gone) return;  // nobody to serve
    Peer& p = peers_[peer];
    ++p.queued[c];
    ++queued_[c];
    ++busy_;
  }
  ledger_.Request(
      peer, priority, bytes,
      [this, peer, c, bytes, grant = std::move(grant)](Status status) mutable {
        OnAnswer(peer, c, bytes, status, grant);
      });
  absl::MutexLock lock(&mu_);
  --busy_;
}

void IngestAdmission::OnAnswer(uint64_t peer, int cls, uint64_t bytes,
                               const Status& status,
                               std::function<void()>& grant) {
  bool use = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);  // held by its queued count
    Peer& p = it->second;
    --p.queued[cls];
    --queued_[cls];
    if (status.ok() && !p.gone) {
      use = true;
      p.charged += bytes;
      charged_ += bytes;
      ++grants_[cls];
    } else if (status.ok()) {
      ++busy_;
    }
    EraseIfIdleLocked(it);
  }
  if (use) {
    grant();
  } else if (status.ok()) {
    // Granted to a peer that went away meanwhile: straight back.
    RunOnLedger({&ledger_, peer, bytes, /*remove=*/false});
    absl::MutexLock lock(&mu_);
    --busy_;
  }
  // Not OK: cancelled (peer forgotten, or the ledger destroyed).
}

void IngestAdmission::Release(uint64_t peer, size_t bytes) {
  bool forget = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    if (it != peers_.end()) {
      Peer& p = it->second;
      const uint64_t n = std::min<uint64_t>(bytes, p.charged);
      p.charged -= n;
      charged_ -= n;
      forget = p.gone && p.charged == 0;
      EraseIfIdleLocked(it);
    }
    ++busy_;
  }
  RunOnLedger({&ledger_, peer, bytes, /*remove=*/false});
  // Its last bytes are written: cancel what it still has queued.
  if (forget) RunOnLedger({&ledger_, peer, 0, /*remove=*/true});
  absl::MutexLock lock(&mu_);
  --busy_;
}

void IngestAdmission::PeerGone(uint64_t peer) {
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end()) return;  // nothing charged, nothing queued
    it->second.gone = true;
    const bool forget = it->second.charged == 0;
    EraseIfIdleLocked(it);
    if (!forget) return;  // forgotten when its last byte is released
    ++busy_;
  }
  RunOnLedger({&ledger_, peer, 0, /*remove=*/true});
  absl::MutexLock lock(&mu_);
  --busy_;
}

void IngestAdmission::EraseIfIdleLocked(std::map<uint64_t, Peer>::iterator it) {
  const Peer& p = it->second;
  if (p.charged == 0 && p.queued[kRestore] == 0 && p.queued[kCheckpoint] == 0) {
    peers_.erase(it);
  }
}

void IngestAdmission::RunOnLedger(const LedgerOp& op) {
  // A Release grants queued requests, whose grants may release again (a
  // gone peer's, or one the transport cannot use any more): queue those
  // here instead of recursing once per queued request.
  thread_local std::vector<LedgerOp>* pending = nullptr;
  if (pending != nullptr) {
    pending->push_back(op);
    return;
  }
  std::vector<LedgerOp> ops{op};
  pending = &ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    const LedgerOp next = ops[i];
    if (next.remove) {
      next.ledger->RemoveClient(next.peer);
    } else {
      // FAILED_PRECONDITION only when a racing RemoveClient already took
      // the bytes back; the ledger clamps, so the books stay exact.
      next.ledger->Release(next.peer, next.bytes).IgnoreError();
    }
  }
  pending = nullptr;
}

AdmissionStats IngestAdmission::Stats() const {
  AdmissionStats s;
  s.budget_bytes = budget_bytes_;
  absl::MutexLock lock(&mu_);
  s.in_flight_bytes = charged_;
  s.queue_depth = queued_[kRestore] + queued_[kCheckpoint];
  s.restore_queue_depth = queued_[kRestore];
  s.restore_grants = grants_[kRestore];
  s.checkpoint_grants = grants_[kCheckpoint];
  for (const auto& [id, p] : peers_) {
    s.clients[id] = {p.charged, p.queued[kRestore] + p.queued[kCheckpoint]};
  }
  return s;
}

bool IngestAdmission::AwaitQueueDepth(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto ready = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return busy_ == 0 && queued_[kRestore] + queued_[kCheckpoint] >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
}

bool IngestAdmission::AwaitIdle(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return busy_ == 0 && charged_ == 0 &&
           queued_[kRestore] + queued_[kCheckpoint] == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
}

}  // namespace stagger::server
