#include "transport/internal/ucx_server.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/internal/same_host.h"
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

std::string JoinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

Result<std::shared_ptr<UcxServerLoop>> UcxServerLoop::Create(
    std::shared_ptr<UcxContext> context, UcxLoopOptions options,
    const std::string& host, uint16_t port,
    transport::RequestHandler* handler) {
  STAGGER_ASSIGN_OR_RETURN(SockAddr addr, ResolveSockAddr(host, port));
  std::shared_ptr<UcxServerLoop> loop(
      new UcxServerLoop(std::move(context), options, handler));
  STAGGER_RETURN_IF_ERROR(loop->Init());

  ucp_listener_params_t params{};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = addr.get();
  params.sockaddr.addrlen = addr.length;
  params.conn_handler.cb = &UcxServerLoop::ConnCallback;
  params.conn_handler.arg = loop.get();
  ucp_listener_h listener = nullptr;
  ucs_status_t st = ucp_listener_create(loop->worker(), &params, &listener);
  std::string where = JoinHostPort(host, port);
  if (st != UCS_OK) {
    return FromUcs(st, absl::StrCat("listening on ", where));
  }
  loop->listener_.reset(listener);
  if (options.same_host_shared_memory) {
    auto address = WorkerAddress(loop->worker());
    if (address.ok()) {
      loop->worker_address_ = *std::move(address);
      loop->host_key_ = SameHostKey();
    } else {
      LogWarning(absl::StrCat(where, ": no shared memory for local clients: ",
                              address.status().message()));
    }
  }

  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(listener, &attr);
  if (st != UCS_OK) {
    return FromUcs(st, absl::StrCat("querying the listener on ", where));
  }
  loop->address_ = JoinHostPort(host, SockAddrFrom(attr.sockaddr).port());
  loop->Start();
  return loop;
}

void UcxServerLoop::ConnCallback(ucp_conn_request_h request, void* arg) {
  auto* loop = static_cast<UcxServerLoop*>(arg);
  loop->Defer([loop, request] { loop->Accept(request); });
}

void UcxServerLoop::Accept(ucp_conn_request_h request) {
  if (stopping() || listener_ == nullptr) {
    if (listener_ != nullptr) ucp_listener_reject(listener_.get(), request);
    return;
  }
  std::string peer = "<unknown client>";
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(request, &attr) == UCS_OK) {
    peer = SockAddrFrom(attr.client_address).ToString();
  }
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.conn_request = request;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler = ErrorHandler();
  ucp_ep_h ep = nullptr;
  ucs_status_t st = ucp_ep_create(worker(), &params, &ep);
  if (st != UCS_OK) {
    LogWarning(
        FromUcs(st, absl::StrCat(address_, ": accepting ", peer)).message());
    return;
  }
  AddEndpoint(ep, std::move(peer));
}

void UcxServerLoop::OnMessage(uint64_t ep_id, const Frame& frame,
                              std::string header, Buffer payload) {
  switch (frame.kind) {
    case FrameKind::kHello:
      Send(ep_id, FrameKind::kHelloAck, 0, frame.request_id, OfferFor(ep_id),
           {}, Buffer(),
           [](Status) {});  // a failure shows up as an endpoint error
      return;
    case FrameKind::kRequest: {
      transport::Message request;
      request.op = frame.op;
      request.header = std::move(header);
      request.payload = std::move(payload);
      request.peer = ep_id;
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
      CloseEndpoint(ep_id, why, /*force=*/true);
      return;
    }
  }
}

std::string UcxServerLoop::OfferFor(uint64_t ep_id) {
  if (host_key_.empty() || token_of_.count(ep_id) != 0) return "";
  // Unguessable, so that no other local process can pose as this client's
  // shared-memory endpoint.
  std::random_device random;
  ShmOffer offer;
  do {
    offer.token = (static_cast<uint64_t>(random()) << 32) ^ random();
  } while (offer.token == 0 || offered_.count(offer.token) != 0);
  offer.host_key = host_key_;
  offer.worker_address = worker_address_;
  offered_[offer.token] = ep_id;
  token_of_[ep_id] = offer.token;
  return EncodeShmOffer(offer);
}

void UcxServerLoop::OnStrayHello(ucp_ep_h ep, std::string header) {
  auto token = DecodeShmToken(header);
  auto it = token.ok() ? offered_.find(*token) : offered_.end();
  if (stopping() || it == offered_.end()) {
    CloseHandle(ep, /*force=*/true);
    return;
  }
  const uint64_t ep_id = it->second;
  offered_.erase(it);  // one endpoint per offer
  if (!AttachAlias(ep_id, ep)) return;
  Send(ep_id, FrameKind::kShmHelloAck, 0, 0, {}, {}, Buffer(),
       [](Status) {});  // a failure shows up as an endpoint error
}

void UcxServerLoop::OnEndpointDown(uint64_t ep_id, const Status& why) {
  auto it = token_of_.find(ep_id);
  if (it == token_of_.end()) return;
  offered_.erase(it->second);
  token_of_.erase(it);
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
