// UcxServerLoop: the progress loop behind a UCX Listener. It owns the
// ucp_listener and the server endpoints it accepts, answers handshakes, and
// hands requests to the RequestHandler with a ReplyChannel that finds its
// endpoint again by id (so a reply for a closed endpoint is dropped, never
// sent on a dead handle).
//
// Thread-safety: Create() and address() from any thread; PostReply() and
// PostNoReply() from any thread; everything else on the progress thread.
#ifndef STAGGER_TRANSPORT_INTERNAL_UCX_SERVER_H_
#define STAGGER_TRANSPORT_INTERNAL_UCX_SERVER_H_

#include <memory>
#include <string>
#include <unordered_map>

#include "transport/internal/ucx_worker_loop.h"
#include "transport/transport.h"

namespace stagger::transport_internal {

class UcxServerLoop final : public UcxWorkerLoop {
 public:
  // Listens on host:port (port 0 picks a free one) and starts the progress
  // thread. UNAVAILABLE when the address is in use, INVALID_ARGUMENT when the
  // host does not resolve.
  static Result<std::shared_ptr<UcxServerLoop>> Create(
      std::shared_ptr<UcxContext> context, UcxLoopOptions options,
      const std::string& host, uint16_t port,
      transport::RequestHandler* handler);

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }

  // Sends the reply to `request_id` on `ep_id`; silently dropped when the
  // endpoint or the loop is gone. A reply that exceeds the size limits is
  // replaced by a "no reply" notice, so that the requester still hears back.
  void PostReply(uint64_t ep_id, uint64_t request_id, uint16_t op,
                 std::string header, transport::Buffer payload);
  // Tells the requester that `request_id` will not be answered.
  void PostNoReply(uint64_t ep_id, uint64_t request_id, std::string reason);

 private:
  UcxServerLoop(std::shared_ptr<UcxContext> context, UcxLoopOptions options,
                transport::RequestHandler* handler)
      : UcxWorkerLoop(std::move(context), options, "stagger-ucx-srv"),
        handler_(handler) {}

  void OnMessage(uint64_t ep_id, const Frame& frame, std::string header,
                 transport::Buffer payload) override;
  void OnEndpointDown(uint64_t ep_id, const Status& why) override;
  void OnStrayHello(ucp_ep_h ep, std::string header) override;
  void OnShutdown() override { listener_.reset(); }
  void Accept(ucp_conn_request_h request);
  // The kHelloAck header for a new connection `ep_id`: a shared-memory
  // offer (same_host.h), or "" when shared memory is off.
  std::string OfferFor(uint64_t ep_id);
  static void ConnCallback(ucp_conn_request_h request, void* arg);

  transport::RequestHandler* const handler_;
  ListenerPtr listener_;
  std::string address_;
  // Shared-memory offers; host_key_ is "" when they are off.
  std::string host_key_;
  std::string worker_address_;
  std::unordered_map<uint64_t, uint64_t> offered_;   // token -> ep_id
  std::unordered_map<uint64_t, uint64_t> token_of_;  // ep_id -> token
};

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_UCX_SERVER_H_
