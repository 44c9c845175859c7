// UcxClientLoop: the progress loop behind one UCX Connection. It owns the
// client endpoint, numbers requests, matches replies to them and completes
// every Call() exactly once.
//
// A call completes when both its send finished (so the borrowed payload is
// no longer read) and its outcome is known: the reply, a "no reply" notice,
// or the connection's failure (UNAVAILABLE naming the peer).
//
// Thread-safety: Connect(), Call() and peer() from any thread; the rest on
// the progress thread.
#ifndef STAGGER_TRANSPORT_INTERNAL_UCX_CLIENT_H_
#define STAGGER_TRANSPORT_INTERNAL_UCX_CLIENT_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/synchronization/notification.h"
#include "transport/internal/ucx_worker_loop.h"
#include "transport/transport.h"

namespace stagger::transport_internal {

class UcxClientLoop final : public UcxWorkerLoop {
 public:
  // Connects to the listener worker at `worker_address` (its bytes), called
  // `peer` in messages, introduces itself as `name` and waits for the
  // listener's handshake answer at most `timeout`. UNAVAILABLE naming the
  // peer when the worker is unreachable, gone or does not answer in time.
  static Result<std::shared_ptr<UcxClientLoop>> Connect(
      std::shared_ptr<UcxContext> context, UcxLoopOptions options,
      std::chrono::milliseconds timeout, std::string peer,
      const std::string& worker_address, const std::string& name);

  // See transport::Connection::Call. `done` runs on the progress thread, or
  // on the caller's thread when the connection is already shut down.
  // With `into` (Connection::CallInto), a reply payload it accepts is
  // pulled there.
  // `flow`: the caller's, when several share this loop (frame.h, FlowOf).
  void Call(uint16_t op, std::string_view header, std::string_view payload,
            transport::ReplyCallback done, transport::SentCallback sent,
            transport::ReplyInto into = {}, uint32_t flow = 0);

  const std::string& peer() const { return peer_; }
  // True once the endpoint failed or the loop stopped. Any thread.
  bool broken() const { return broken_.load(); }
  // The transports UCX chose for the endpoint; set before Connect()
  // returns, so any thread may read it after.
  const transport::DataPath& path() const { return path_; }

 private:
  struct PendingCall {
    transport::ReplyCallback done;
    transport::SentCallback on_sent;  // may be empty
    bool sent = false;
    std::optional<Result<transport::Message>> outcome;
    transport::ReplyInto into;  // data == nullptr: none
    // A reply payload is being pulled into `into`: the call does not
    // finish (its caller may then free the memory) until the pull ended.
    bool pulling_into = false;
  };

  UcxClientLoop(std::shared_ptr<UcxContext> context, UcxLoopOptions options,
                std::string peer)
      : UcxWorkerLoop(std::move(context), options, "stagger-ucx-cli"),
        peer_(std::move(peer)) {}

  void StartCall(uint16_t op, const std::string& header,
                 std::string_view payload, transport::ReplyCallback done,
                 transport::SentCallback sent, transport::ReplyInto into,
                 uint32_t flow);
  void Settle(uint64_t request_id, Result<transport::Message> outcome);
  void OnSent(uint64_t request_id, const Status& status);
  void MaybeFinish(uint64_t request_id);
  void ReportConnect(const Status& status);

  void OnMessage(uint64_t ep_id, const Frame& frame, std::string header,
                 transport::Buffer payload) override;
  void OnEndpointDown(uint64_t ep_id, const Status& why) override;
  transport::Buffer PullInto(const Frame& frame, const std::string& header,
                             size_t length) override;
  void PullEnded(const Frame& frame) override;
  void OnStopped() override;

  const std::string peer_;

  // Handshake outcome, read by Connect() once connected_ is notified.
  absl::Notification connected_;
  Status connect_status_;

  std::atomic<bool> broken_{false};

  // This worker's address, sent in each hello (the listener answers on an
  // endpoint of its own made from it).
  std::string own_address_;

  // Written by the progress thread before connected_ is notified.
  transport::DataPath path_;

  // Progress thread only.
  uint64_t ep_id_ = 0;
  Status down_;  // why the endpoint went away; OK while it is up
  uint64_t next_request_id_ = 1;
  std::map<uint64_t, PendingCall> pending_;
};

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_UCX_CLIENT_H_
