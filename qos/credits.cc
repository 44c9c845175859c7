#include "qos/credits.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace stagger::qos {
namespace {

void RunAll(std::vector<CreditLedger::GrantCallback>& callbacks,
            const Status& status) {
  for (CreditLedger::GrantCallback& cb : callbacks) {
    if (cb) cb(status);
  }
}

}  // namespace

CreditLedger::CreditLedger(uint64_t budget_bytes)
    : budget_bytes_(budget_bytes) {}

CreditLedger::~CreditLedger() {
  std::vector<GrantCallback> cancelled;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, state] : clients_) {
      for (auto& queue : state.queue) {
        for (Pending& p : queue) cancelled.push_back(std::move(p.done));
      }
    }
    clients_.clear();
  }
  RunAll(cancelled, absl::CancelledError("credit ledger destroyed"));
}

void CreditLedger::Request(ClientId client, Priority priority, uint64_t bytes,
                           GrantCallback done) {
  std::vector<GrantCallback> granted;
  {
    absl::MutexLock lock(&mu_);
    const int c = static_cast<int>(priority);
    clients_[client].queue[c].push_back({next_seq_++, bytes, std::move(done)});
    ++queued_[c];
    GrantLocked(&granted);
  }
  RunAll(granted, absl::OkStatus());
}

void CreditLedger::GrantLocked(std::vector<GrantCallback>* granted) {
  for (;;) {
    auto pick = clients_.end();
    int c = 0;
    for (; c < kPriorities; ++c) {
      if (queued_[c] == 0) continue;
      for (auto it = clients_.begin(); it != clients_.end(); ++it) {
        const ClientState& s = it->second;
        if (s.queue[c].empty()) continue;
        if (pick == clients_.end() || s.in_flight < pick->second.in_flight ||
            (s.in_flight == pick->second.in_flight &&
             s.queue[c].front().seq < pick->second.queue[c].front().seq)) {
          pick = it;
        }
      }
      break;
    }
    if (pick == clients_.end()) return;
    ClientState& state = pick->second;
    Pending& head = state.queue[c].front();
    const bool fits =
        in_flight_ <= budget_bytes_ && head.bytes <= budget_bytes_ - in_flight_;
    if (!fits && in_flight_ != 0) return;  // Wait for credit; keep order.
    state.in_flight += head.bytes;
    in_flight_ += head.bytes;
    granted->push_back(std::move(head.done));
    state.queue[c].pop_front();
    --queued_[c];
    EraseIfIdleLocked(pick->first);
  }
}

void CreditLedger::EraseIfIdleLocked(ClientId client) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return;
  const ClientState& s = it->second;
  if (s.in_flight != 0) return;
  for (const auto& q : s.queue) {
    if (!q.empty()) return;
  }
  clients_.erase(it);
}

Status CreditLedger::Release(ClientId client, uint64_t bytes) {
  std::vector<GrantCallback> granted;
  Status status;
  {
    absl::MutexLock lock(&mu_);
    auto it = clients_.find(client);
    uint64_t held = it == clients_.end() ? 0 : it->second.in_flight;
    uint64_t returned = bytes;
    if (bytes > held) {
      status = absl::FailedPreconditionError(
          absl::StrCat("credits: client ", client, " releases ", bytes,
                       " bytes but holds ", held));
      returned = held;
    }
    if (it != clients_.end()) it->second.in_flight -= returned;
    in_flight_ -= returned;
    EraseIfIdleLocked(client);
    GrantLocked(&granted);
  }
  RunAll(granted, absl::OkStatus());
  return status;
}

void CreditLedger::RemoveClient(ClientId client) {
  std::vector<GrantCallback> cancelled;
  std::vector<GrantCallback> granted;
  {
    absl::MutexLock lock(&mu_);
    auto it = clients_.find(client);
    if (it == clients_.end()) return;
    for (int c = 0; c < kPriorities; ++c) {
      for (Pending& p : it->second.queue[c]) {
        cancelled.push_back(std::move(p.done));
      }
      queued_[c] -= it->second.queue[c].size();
    }
    in_flight_ -= it->second.in_flight;
    clients_.erase(it);
    GrantLocked(&granted);
  }
  RunAll(cancelled, absl::CancelledError(
                        absl::StrCat("credits: client ", client, " removed")));
  RunAll(granted, absl::OkStatus());
}

uint64_t CreditLedger::in_flight_bytes() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

uint64_t CreditLedger::in_flight_bytes(ClientId client) const {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.in_flight;
}

size_t CreditLedger::queue_depth() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (size_t q : queued_) n += q;
  return n;
}

size_t CreditLedger::queue_depth(ClientId client) const {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(client);
  if (it == clients_.end()) return 0;
  size_t n = 0;
  for (const auto& q : it->second.queue) n += q.size();
  return n;
}

}  // namespace stagger::qos
