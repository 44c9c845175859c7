#include "transport/ucx_transport.h"

#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

// "host pid N": how this process introduces itself to listeners (their log
// lines name it).
std::string ProcessName() {
  char host[64] = {0};
  gethostname(host, sizeof host - 1);
  return absl::StrCat(host, " pid ", getpid());
}

class UcxListener final : public Listener {
 public:
  explicit UcxListener(std::shared_ptr<UcxServerLoop> loop)
      : loop_(std::move(loop)) {}
  ~UcxListener() override { loop_->Stop(); }
  std::string address() const override { return loop_->address(); }

 private:
  std::shared_ptr<UcxServerLoop> loop_;
};

// A client loop, stopped when the last connection on it goes.
struct ClientLoopOwner {
  explicit ClientLoopOwner(std::shared_ptr<UcxClientLoop> l)
      : loop(std::move(l)) {}
  ~ClientLoopOwner() { loop->Stop(); }
  // Each connection on a shared loop is a flow of its own (frame.h).
  uint32_t NextFlow() {
    return next_flow.fetch_add(1) % transport_internal::kMaxFlow + 1;
  }
  const std::shared_ptr<UcxClientLoop> loop;
  std::atomic<uint32_t> next_flow{0};
};

class UcxConnection final : public Connection {
 public:
  UcxConnection(std::shared_ptr<ClientLoopOwner> owner, std::string address)
      : owner_(std::move(owner)),
        loop_(owner_->loop.get()),
        flow_(owner_->NextFlow()),
        address_(std::move(address)) {}

  using Connection::Call;
  void Call(uint16_t op, std::string_view header, std::string_view payload,
            ReplyCallback done, SentCallback sent) override {
    loop_->Call(op, header, payload, std::move(done), std::move(sent), {},
                flow_);
  }
  std::string peer() const override { return address_; }
  bool broken() const override { return loop_->broken(); }
  DataPath path() const override { return loop_->path(); }
  void CallInto(uint16_t op, std::string_view header, std::string_view payload,
                ReplyCallback done, ReplyInto into) override {
    loop_->Call(op, header, payload, std::move(done), nullptr, std::move(into),
                flow_);
  }

 private:
  const std::shared_ptr<ClientLoopOwner> owner_;
  UcxClientLoop* const loop_;  // owner_->loop
  const uint32_t flow_;
  const std::string address_;  // as given to Connect()
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(std::shared_ptr<UcxContext> context,
               const UcxTransportOptions& options)
      : context_(std::move(context)), options_(options), name_(ProcessName()) {
    loop_options_.rndv_threshold = options.rndv_threshold;
    loop_options_.max_inflight_pull_bytes = options.max_inflight_pull_bytes;
    // One pool for all of this transport's listeners and connections, so
    // a process's cached blocks are bounded once, not per connection.
    loop_options_.pull_buffers = BufferPool::Create(
        options.pull_buffer_cache_bytes, options.huge_page_buffers);
    loop_options_.close_timeout = options.close_timeout;
    if (options.prefill_bytes > 0) {
      prefill_ = std::thread([this, pool = loop_options_.pull_buffers] {
        pool->Prefill(options_.prefill_bytes, options_.prefill_payload_bytes,
                      options_.prefill_headroom, &stop_prefill_);
      });
    }
  }
  ~UcxTransport() override {
    stop_prefill_ = true;
    if (prefill_.joinable()) prefill_.join();
  }

  Result<std::unique_ptr<Listener>> Listen(
      const std::string& address, RequestHandler* handler,
      const ListenOptions& listen_options) override {
    if (handler == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("listening on ", address, ": no request handler"));
    }
    if (address != transport_internal::kWorkerAddressPrefix) {
      return absl::InvalidArgumentError(absl::StrCat(
          "UCX listens at its worker's address, not at '", address,
          "': listen on \"ucx:\" (UCX_NET_DEVICES and UCX_TCP_PORT_RANGE "
          "choose UCX's own interfaces and ports)"));
    }
    UcxLoopOptions options = loop_options_;
    options.admission = listen_options.admission;
    options.payload_headroom = listen_options.payload_headroom;
    STAGGER_ASSIGN_OR_RETURN(auto loop,
                             UcxServerLoop::Create(context_, options, handler));
    return std::unique_ptr<Listener>(new UcxListener(std::move(loop)));
  }

  Result<std::unique_ptr<Connection>> Connect(
      const std::string& address) override {
    STAGGER_ASSIGN_OR_RETURN(auto owner, NewLoop(address));
    return std::unique_ptr<Connection>(
        new UcxConnection(std::move(owner), address));
  }

  Result<std::unique_ptr<Connection>> ConnectShared(
      const std::string& address) override {
    // One connect at a time: callers that come together for one address
    // wait for the first and share its loop.
    absl::MutexLock l(&shared_mu_);
    for (auto it = shared_.begin(); it != shared_.end();) {
      it = it->second.expired() ? shared_.erase(it) : std::next(it);
    }
    std::shared_ptr<ClientLoopOwner> owner = shared_[address].lock();
    if (owner == nullptr || owner->loop->broken()) {
      STAGGER_ASSIGN_OR_RETURN(owner, NewLoop(address));
      shared_[address] = owner;
    }
    return std::unique_ptr<Connection>(
        new UcxConnection(std::move(owner), address));
  }

 private:
  Result<std::shared_ptr<ClientLoopOwner>> NewLoop(const std::string& address) {
    STAGGER_ASSIGN_OR_RETURN(std::string worker,
                             transport_internal::DecodeWorkerAddress(address));
    STAGGER_ASSIGN_OR_RETURN(
        auto loop, UcxClientLoop::Connect(
                       context_, loop_options_, options_.connect_timeout,
                       transport_internal::WorkerLabel(worker), worker, name_));
    return std::make_shared<ClientLoopOwner>(std::move(loop));
  }

  const std::shared_ptr<UcxContext> context_;
  const UcxTransportOptions options_;
  const std::string name_;  // what Connect() calls this process in its hello
  UcxLoopOptions loop_options_;
  absl::Mutex shared_mu_;
  // ConnectShared's loops by address, while a connection holds them.
  std::map<std::string, std::weak_ptr<ClientLoopOwner>> shared_
      ABSL_GUARDED_BY(shared_mu_);
  std::atomic<bool> stop_prefill_{false};
  std::thread prefill_;  // last: uses the members above
};

}  // namespace

Result<std::unique_ptr<Transport>> NewUcxTransport(
    const UcxTransportOptions& options) {
  STAGGER_ASSIGN_OR_RETURN(
      auto context,
      UcxContext::Create(options.net_devices, options.cross_memory));
  return std::unique_ptr<Transport>(
      new UcxTransport(std::move(context), options));
}

}  // namespace stagger::transport
