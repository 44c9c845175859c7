#include "transport/internal/ucx_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/internal/ucx_status.h"

namespace stagger::transport_internal {
namespace {

using transport::Buffer;

class UcxReplyChannel final : public transport::ReplyChannel {
 public:
  UcxReplyChannel(std::shared_ptr<UcxServerLoop> loop, uint64_t ep_id,
                  uint64_t request_id)
      : loop_(std::move(loop)), ep_id_(ep_id), request_id_(request_id) {}

  ~UcxReplyChannel() override {
    if (!sent_) {
      loop_->PostNoReply(ep_id_, request_id_,
                         "the handler dropped the request without replying");
    }
  }

  void Send(uint16_t op, std::string header, Buffer payload) override {
    if (sent_) {
      LogWarning("ReplyChannel::Send called twice; the second reply dropped");
      return;
    }
    sent_ = true;
    loop_->PostReply(ep_id_, request_id_, op, std::move(header),
                     std::move(payload));
  }

 private:
  const std::shared_ptr<UcxServerLoop> loop_;
  const uint64_t ep_id_;
  const uint64_t request_id_;
  bool sent_ = false;
};

// A client's name for itself, from its kHello (for log lines only: it is
// not checked): printable ASCII, at most 64 bytes.
std::string ClientName(absl::string_view said) {
  std::string out;
  for (char c : said.substr(0, 64)) {
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  return out.empty() ? "a client" : out;
}

}  // namespace

Result<std::shared_ptr<UcxServerLoop>> UcxServerLoop::Create(
    std::shared_ptr<UcxContext> context, UcxLoopOptions options,
    transport::RequestHandler* handler) {
  std::shared_ptr<UcxServerLoop> loop(
      new UcxServerLoop(std::move(context), options, handler));
  STAGGER_RETURN_IF_ERROR(loop->Init());
  STAGGER_ASSIGN_OR_RETURN(std::string address, WorkerAddress(loop->worker()));
  loop->address_ = EncodeWorkerAddress(address);
  loop->Start();
  return loop;
}

void UcxServerLoop::OnStrayHello(FrameKind kind, std::string header) {
  if (stopping()) return;
  auto hello = DecodeHello(header);
  if (!hello.ok()) {
    LogWarning(absl::StrCat(address_.substr(0, 12),
                            "...: ", hello.status().message(), "; ignored"));
    return;
  }
  if (kind == FrameKind::kHello) Accept(*hello);
}

void UcxServerLoop::Accept(const Hello& hello) {
  std::string name = ClientName(hello.rest);
  Result<ucp_ep_h> ep = ConnectTo(hello.worker_address, name);
  if (!ep.ok()) {
    LogWarning(absl::StrCat(ep.status().message(), "; hello ignored"));
    return;
  }
  const uint64_t ep_id = AddEndpoint(*ep, std::move(name));
  Send(ep_id, FrameKind::kHelloAck, 0, 0, {}, {}, Buffer(),
       [](Status) {});  // a failure shows up as an endpoint error
}

void UcxServerLoop::OnMessage(uint64_t ep_id, const Frame& frame,
                              std::string header, Buffer payload) {
  switch (frame.kind) {
    case FrameKind::kHello:
      Send(ep_id, FrameKind::kHelloAck, 0, frame.request_id, {}, {}, Buffer(),
           [](Status) {});  // a failure shows up as an endpoint error
      return;
    case FrameKind::kRequest: {
      transport::Message request;
      request.op = frame.op;
      request.header = std::move(header);
      request.payload = std::move(payload);
      request.peer = AdmissionClient(ep_id, FlowOf(frame.request_id));
      auto self = std::static_pointer_cast<UcxServerLoop>(shared_from_this());
      handler_->OnRequest(std::move(request),
                          std::make_unique<UcxReplyChannel>(
                              std::move(self), ep_id, frame.request_id));
      return;
    }
    default: {
      Status why = absl::UnavailableError(
          absl::StrCat(PeerOf(ep_id), ": unexpected frame kind ",
                       static_cast<int>(frame.kind), " from a client"));
      LogWarning(absl::StrCat(why.message(), "; closing the connection"));
      Expel(ep_id, why);
      return;
    }
  }
}

void UcxServerLoop::PostReply(uint64_t ep_id, uint64_t request_id, uint16_t op,
                              std::string header, Buffer payload) {
  if (header.size() > transport::kMaxHeaderBytes ||
      payload.size() > transport::kMaxPayloadBytes) {
    std::string why = absl::StrCat(
        "reply of ", header.size(), " header and ", payload.size(),
        " payload bytes exceeds the limits (", transport::kMaxHeaderBytes, ", ",
        transport::kMaxPayloadBytes, ")");
    LogWarning(why);
    PostNoReply(ep_id, request_id, std::move(why));
    return;
  }
  // A false Post() means the listener is gone: the reply is dropped.
  Post([this, ep_id, request_id, op, header = std::move(header),
        payload = std::move(payload)]() mutable {
    std::string_view view = payload.view();
    Send(ep_id, FrameKind::kReply, op, request_id, header, view,
         std::move(payload), [](Status) {});
  });
}

void UcxServerLoop::PostNoReply(uint64_t ep_id, uint64_t request_id,
                                std::string reason) {
  if (reason.size() > transport::kMaxHeaderBytes) {
    reason.resize(transport::kMaxHeaderBytes);
  }
  Post([this, ep_id, request_id, reason = std::move(reason)] {
    Send(ep_id, FrameKind::kNoReply, 0, request_id, reason, {}, Buffer(),
         [](Status) {});
  });
}

}  // namespace stagger::transport_internal
