#include "transport/internal/ucx_client.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "transport/internal/ucx_lanes.h"
#include "transport/internal/ucx_status.h"
#include "util/log.h"

namespace stagger::transport_internal {
namespace {

using transport::Buffer;
using transport::Message;

Status AsUnavailable(const Status& s) {
  if (s.code() == absl::StatusCode::kUnavailable) return s;
  return absl::UnavailableError(s.message());
}

Status CheckSizes(std::string_view header, std::string_view payload) {
  if (header.size() > transport::kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "message header of ", header.size(), " bytes exceeds the limit of ",
        transport::kMaxHeaderBytes));
  }
  if (payload.size() > transport::kMaxPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "payload of ", payload.size(), " bytes exceeds the limit of ",
        transport::kMaxPayloadBytes));
  }
  return absl::OkStatus();
}

}  // namespace

Result<std::shared_ptr<UcxClientLoop>> UcxClientLoop::Connect(
    std::shared_ptr<UcxContext> context, UcxLoopOptions options,
    std::chrono::milliseconds timeout, std::string peer,
    const std::string& worker_address, const std::string& name) {
  std::shared_ptr<UcxClientLoop> loop(
      new UcxClientLoop(std::move(context), options, std::move(peer)));
  const std::string where = absl::StrCat("connecting to ", loop->peer_);
  STAGGER_RETURN_IF_ERROR(WithContext(loop->Init(), where));

  // The loop thread is not running yet, so this thread may drive the worker.
  STAGGER_ASSIGN_OR_RETURN(ucp_ep_h ep,
                           loop->ConnectTo(worker_address, loop->peer_));
  loop->ep_id_ = loop->AddEndpoint(ep, loop->peer_);
  // The hello carries our address: the listener answers on an endpoint of
  // its own made from it. Until it answers we do not know that the worker
  // is still there.
  STAGGER_ASSIGN_OR_RETURN(loop->own_address_, WorkerAddress(loop->worker()));
  loop->Send(loop->ep_id_, FrameKind::kHello, 0, 0,
             EncodeHello({loop->own_address_, name}), {}, Buffer(),
             [](Status) {});  // a failure shows up as an endpoint error
  loop->Start();

  bool answered = loop->connected_.WaitForNotificationWithTimeout(
      absl::FromChrono(timeout));
  if (!answered) {
    loop->Stop();
    return absl::UnavailableError(
        absl::StrCat(where, ": no answer within ", timeout.count(), " ms"));
  }
  if (!loop->connect_status_.ok()) {
    Status s = loop->connect_status_;
    loop->Stop();
    return s;
  }
  return loop;
}

void UcxClientLoop::ReportConnect(const Status& status) {
  if (connected_.HasBeenNotified()) return;
  connect_status_ = status;
  connected_.Notify();
}

void UcxClientLoop::Call(uint16_t op, std::string_view header,
                         std::string_view payload,
                         transport::ReplyCallback done,
                         transport::SentCallback sent,
                         transport::ReplyInto into, uint32_t flow) {
  Status valid = CheckSizes(header, payload);
  if (!valid.ok()) {
    // Report on the progress thread like every other outcome, unless the
    // loop is gone.
    auto shared = std::make_shared<transport::ReplyCallback>(std::move(done));
    if (!Post([shared, valid] { (*shared)(valid); })) (*shared)(valid);
    return;
  }
  auto shared = std::make_shared<transport::ReplyCallback>(std::move(done));
  auto shared_sent = std::make_shared<transport::SentCallback>(std::move(sent));
  bool posted = Post([this, op, header = std::string(header), payload, shared,
                      shared_sent, into = std::move(into), flow]() mutable {
    StartCall(op, header, payload, std::move(*shared), std::move(*shared_sent),
              std::move(into), flow);
  });
  if (!posted) {
    (*shared)(absl::UnavailableError(
        absl::StrCat("connection to ", peer_, " is closed")));
  }
}

void UcxClientLoop::StartCall(uint16_t op, const std::string& header,
                              std::string_view payload,
                              transport::ReplyCallback done,
                              transport::SentCallback sent,
                              transport::ReplyInto into, uint32_t flow) {
  if (!down_.ok() || stopping()) {
    done(down_.ok() ? absl::UnavailableError(
                          absl::StrCat("connection to ", peer_, " is closing"))
                    : down_);
    return;
  }
  uint64_t id = RequestId(flow, next_request_id_++);
  pending_[id].done = std::move(done);
  pending_[id].on_sent = std::move(sent);
  pending_[id].into = std::move(into);
  Send(ep_id_, FrameKind::kRequest, op, id, header, payload, Buffer(),
       [this, id](Status s) { OnSent(id, s); });
}

void UcxClientLoop::OnSent(uint64_t request_id, const Status& status) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return;
  it->second.sent = true;
  if (!status.ok() && !it->second.outcome.has_value()) {
    it->second.outcome =
        AsUnavailable(WithContext(status, absl::StrCat("request to ", peer_)));
  }
  if (status.ok() && it->second.on_sent) {
    transport::SentCallback on_sent = std::move(it->second.on_sent);
    on_sent();
  }
  MaybeFinish(request_id);
}

void UcxClientLoop::Settle(uint64_t request_id, Result<Message> outcome) {
  auto it = pending_.find(request_id);
  if (it == pending_.end() || it->second.outcome.has_value()) {
    return;  // a late or duplicate answer: the call already has its outcome
  }
  it->second.outcome = std::move(outcome);
  MaybeFinish(request_id);
}

void UcxClientLoop::MaybeFinish(uint64_t request_id) {
  auto it = pending_.find(request_id);
  if (it == pending_.end() || !it->second.sent ||
      !it->second.outcome.has_value() || it->second.pulling_into) {
    return;
  }
  PendingCall call = std::move(it->second);
  pending_.erase(it);
  call.done(*std::move(call.outcome));
}

void UcxClientLoop::OnMessage(uint64_t ep_id, const Frame& frame,
                              std::string header, Buffer payload) {
  switch (frame.kind) {
    case FrameKind::kHelloAck:
      if (ucp_ep_h ep = EndpointHandle(ep_id)) path_ = DescribeEndpoint(ep);
      ReportConnect(absl::OkStatus());
      return;
    case FrameKind::kReply: {
      Message reply;
      reply.op = frame.op;
      reply.header = std::move(header);
      reply.payload = std::move(payload);
      Settle(frame.request_id, std::move(reply));
      return;
    }
    case FrameKind::kNoReply:
      Settle(frame.request_id,
             absl::UnavailableError(absl::StrCat(peer_, ": ", header)));
      return;
    default: {
      Status why = absl::UnavailableError(
          absl::StrCat(peer_, ": unexpected frame kind ",
                       static_cast<int>(frame.kind), " from the server"));
      LogWarning(absl::StrCat(why.message(), "; closing the connection"));
      Expel(ep_id, why);
      return;
    }
  }
}

transport::Buffer UcxClientLoop::PullInto(const Frame& frame,
                                          const std::string& header,
                                          size_t length) {
  if (frame.kind != FrameKind::kReply) return Buffer();
  auto it = pending_.find(frame.request_id);
  if (it == pending_.end() || it->second.outcome.has_value()) return Buffer();
  PendingCall& call = it->second;
  if (call.into.data == nullptr || call.into.size != length ||
      (call.into.accept && !call.into.accept(header))) {
    return Buffer();
  }
  call.pulling_into = true;
  return Buffer::Borrow(call.into.data, length);
}

void UcxClientLoop::PullEnded(const Frame& frame) {
  if (frame.kind != FrameKind::kReply) return;
  auto it = pending_.find(frame.request_id);
  if (it == pending_.end() || !it->second.pulling_into) return;
  it->second.pulling_into = false;
  MaybeFinish(frame.request_id);
}

void UcxClientLoop::OnEndpointDown(uint64_t ep_id, const Status& why) {
  broken_ = true;
  if (down_.ok()) down_ = AsUnavailable(why);
  ReportConnect(down_);
  std::vector<uint64_t> ids;
  for (auto& [id, call] : pending_) {
    if (!call.outcome.has_value()) call.outcome = down_;
    ids.push_back(id);
  }
  // Calls whose send is still in flight finish when UCX completes it (the
  // endpoint's requests are purged as it closes).
  for (uint64_t id : ids) MaybeFinish(id);
}

void UcxClientLoop::OnStopped() {
  broken_ = true;
  Status closed = down_.ok() ? absl::UnavailableError(absl::StrCat(
                                   "connection to ", peer_, " was closed"))
                             : down_;
  ReportConnect(closed);
  // The worker is gone, so no payload is read any more: finish everything.
  std::map<uint64_t, PendingCall> calls;
  calls.swap(pending_);
  for (auto& [id, call] : calls) {
    call.done(call.outcome.has_value() ? *std::move(call.outcome)
                                       : Result<Message>(closed));
  }
}

}  // namespace stagger::transport_internal
