// UcxServerLoop: the progress loop behind a UCX Listener. It has no socket
// listener: clients connect to its worker's address (ucp_worker_get_address,
// handed out by whoever created the listener: the server's authenticated
// control plane) and introduce each endpoint with a kHello. It owns the
// endpoints UCX made for them, answers the handshakes, and
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

#include "transport/internal/ucx_worker_loop.h"
#include "transport/transport.h"

namespace stagger::transport_internal {

class UcxServerLoop final : public UcxWorkerLoop {
 public:
  // Creates the worker and starts the progress thread. INTERNAL (from
  // FromUcs) when UCX cannot make a worker or tell its address.
  static Result<std::shared_ptr<UcxServerLoop>> Create(
      std::shared_ptr<UcxContext> context, UcxLoopOptions options,
      transport::RequestHandler* handler);

  // The worker's address, as Connect() takes it (EncodeWorkerAddress).
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
  void OnStrayHello(FrameKind kind, std::string header) override;
  // A new client's kHello: an endpoint back to it, and the answer on it.
  void Accept(const Hello& hello);

  transport::RequestHandler* const handler_;
  std::string address_;
};

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_UCX_SERVER_H_
