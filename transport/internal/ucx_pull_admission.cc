// UcxWorkerLoop's side of pull admission (transport.h, PullAdmission).
//
// A rendezvous payload that arrives while an admission is set waits in
// pulls_admitting_ (its descriptor held, its sender waiting) until the grant
// comes back. The grant may run on any thread, so it only creates the
// charge and posts it to the progress thread; whatever happens next, the
// charge is owned by something that releases it when dropped: the posted
// task (if the loop is gone), the PullOp (waiting for room, being pulled,
// failed) and finally the payload Buffer the handler gets.
#include <memory>
#include <utility>

#include "transport/internal/admission_charge.h"
#include "transport/internal/ucx_worker_loop.h"

namespace stagger::transport_internal {

void UcxWorkerLoop::QueuePull(std::unique_ptr<PullOp> op) {
  if (options_.admission == nullptr) {
    pulls_waiting_.push_back(std::move(op));
    return;
  }
  const uint64_t id = op->id;
  pulls_admitting_.emplace(id, std::move(op));
  // Called inside the AM callback: the admission (user code) runs later.
  Defer([this, id] { AskAdmission(id); });
}

void UcxWorkerLoop::AskAdmission(uint64_t op_id) {
  auto it = pulls_admitting_.find(op_id);
  if (it == pulls_admitting_.end()) return;  // its peer went away
  PullOp* op = it->second.get();
  if (stopping_ || !EndpointAlive(op->ep_id)) {
    // Failed in the same progress round; nobody will read the data.
    ucp_am_data_release(worker(), op->desc);
    pulls_admitting_.erase(it);
    return;
  }
  transport::PullAdmission* const admission = options_.admission;
  // Fair among connections, and among the flows of a shared one.
  const uint64_t peer =
      AdmissionClient(op->ep_id, FlowOf(op->frame.request_id));
  const size_t bytes = op->length;
  admission_peers_.insert(peer);
  std::weak_ptr<UcxWorkerLoop> weak = weak_from_this();
  admission->Request(peer, bytes, [weak, admission, op_id, peer, bytes] {
    auto charge = std::make_unique<AdmissionCharge>(admission, peer, bytes);
    std::shared_ptr<UcxWorkerLoop> loop = weak.lock();
    if (loop == nullptr) return;  // the charge goes back at once
    UcxWorkerLoop* raw = loop.get();
    // A refused Post destroys the task, and with it the charge.
    raw->Post([raw, op_id, charge = std::move(charge)]() mutable {
      raw->Admitted(op_id, std::move(charge));
    });
  });
}

void UcxWorkerLoop::Admitted(
    uint64_t op_id, std::unique_ptr<transport::Buffer::Attachment> charge) {
  auto it = pulls_admitting_.find(op_id);
  if (it == pulls_admitting_.end()) return;  // dropped; charge released
  std::unique_ptr<PullOp> op = std::move(it->second);
  pulls_admitting_.erase(it);
  op->charge = std::move(charge);
  pulls_waiting_.push_back(std::move(op));  // RunDeferred starts it
}

void UcxWorkerLoop::DropPeerAdmissions(uint64_t ep_id) {
  if (options_.admission == nullptr) return;
  for (auto it = pulls_admitting_.begin(); it != pulls_admitting_.end();) {
    if (it->second->ep_id != ep_id) {
      ++it;
      continue;
    }
    // Without a worker the descriptor went with it.
    if (worker() != nullptr) ucp_am_data_release(worker(), it->second->desc);
    it = pulls_admitting_.erase(it);
  }
  for (auto it = admission_peers_.begin(); it != admission_peers_.end();) {
    if (EndpointOf(*it) != ep_id) {
      ++it;
      continue;
    }
    options_.admission->PeerGone(*it);
    it = admission_peers_.erase(it);
  }
}

void UcxWorkerLoop::DropAllAdmissions() {
  if (options_.admission == nullptr) return;
  for (auto& [id, op] : pulls_admitting_) {
    ucp_am_data_release(worker(), op->desc);
  }
  pulls_admitting_.clear();
  std::unordered_set<uint64_t> peers;
  peers.swap(admission_peers_);
  for (uint64_t peer : peers) options_.admission->PeerGone(peer);
}

}  // namespace stagger::transport_internal
