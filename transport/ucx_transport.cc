#include "transport/ucx_transport.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/buffer_pool.h"
#include "transport/internal/ucx_client.h"
#include "transport/internal/ucx_handles.h"
#include "transport/internal/ucx_server.h"

namespace stagger::transport {
namespace {

using transport_internal::UcxClientLoop;
using transport_internal::UcxContext;
using transport_internal::UcxLoopOptions;
using transport_internal::UcxServerLoop;

class UcxListener final : public Listener {
 public:
  explicit UcxListener(std::shared_ptr<UcxServerLoop> loop)
      : loop_(std::move(loop)) {}
  ~UcxListener() override { loop_->Stop(); }
  std::string address() const override { return loop_->address(); }

 private:
  std::shared_ptr<UcxServerLoop> loop_;
};

class UcxConnection final : public Connection {
 public:
  explicit UcxConnection(std::shared_ptr<UcxClientLoop> loop)
      : loop_(std::move(loop)) {}
  ~UcxConnection() override { loop_->Stop(); }

  using Connection::Call;
  void Call(uint16_t op, std::string_view header, std::string_view payload,
            ReplyCallback done, SentCallback sent) override {
    loop_->Call(op, header, payload, std::move(done), std::move(sent));
  }
  std::string peer() const override { return loop_->peer(); }
  bool shared_memory() const { return loop_->shared_memory(); }

 private:
  std::shared_ptr<UcxClientLoop> loop_;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(std::shared_ptr<UcxContext> context,
               const UcxTransportOptions& options)
      : context_(std::move(context)), options_(options) {
    loop_options_.rndv_threshold = options.rndv_threshold;
    loop_options_.max_inflight_pull_bytes = options.max_inflight_pull_bytes;
    // One pool for all of this transport's listeners and connections, so
    // a process's cached blocks are bounded once, not per connection.
    loop_options_.pull_buffers =
        BufferPool::Create(options.pull_buffer_cache_bytes);
    loop_options_.close_timeout = options.close_timeout;
    loop_options_.same_host_shared_memory = options.same_host_shared_memory;
  }

  Result<std::unique_ptr<Listener>> Listen(
      const std::string& address, RequestHandler* handler,
      const ListenOptions& listen_options) override {
    if (handler == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("listening on ", address, ": no request handler"));
    }
    STAGGER_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(address));
    UcxLoopOptions options = loop_options_;
    options.admission = listen_options.admission;
    options.payload_headroom = listen_options.payload_headroom;
    STAGGER_ASSIGN_OR_RETURN(
        auto loop, UcxServerLoop::Create(context_, options, host_port.first,
                                         host_port.second, handler));
    return std::unique_ptr<Listener>(new UcxListener(std::move(loop)));
  }

  Result<std::unique_ptr<Connection>> Connect(
      const std::string& address) override {
    STAGGER_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(address));
    STAGGER_ASSIGN_OR_RETURN(auto addr, transport_internal::ResolveSockAddr(
                                            host_port.first, host_port.second));
    STAGGER_ASSIGN_OR_RETURN(
        auto loop,
        UcxClientLoop::Connect(context_, loop_options_,
                               options_.connect_timeout, address, addr));
    return std::unique_ptr<Connection>(new UcxConnection(std::move(loop)));
  }

 private:
  const std::shared_ptr<UcxContext> context_;
  const UcxTransportOptions options_;
  UcxLoopOptions loop_options_;
};

}  // namespace

Result<std::unique_ptr<Transport>> NewUcxTransport(
    const UcxTransportOptions& options) {
  STAGGER_ASSIGN_OR_RETURN(auto context,
                           UcxContext::Create(options.same_host_shared_memory));
  return std::unique_ptr<Transport>(
      new UcxTransport(std::move(context), options));
}

bool SendsOverSharedMemory(const Connection& connection) {
  const auto* ucx = dynamic_cast<const UcxConnection*>(&connection);
  return ucx != nullptr && ucx->shared_memory();
}

}  // namespace stagger::transport
