#include "transport/inproc_transport.h"

#include <atomic>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "transport/internal/admission_charge.h"
#include "transport/internal/serial_executor.h"

namespace stagger::transport {
namespace {

using transport_internal::AdmissionCharge;
using transport_internal::SerialExecutor;

Status CheckSizes(absl::string_view what, size_t header, size_t payload) {
  if (header > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " header of ", header,
                     " bytes exceeds the limit of ", kMaxHeaderBytes));
  }
  if (payload > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " payload of ", payload,
                     " bytes exceeds the limit of ", kMaxPayloadBytes));
  }
  return absl::OkStatus();
}

// The client side of one in-process connection.
class ConnCore {
 public:
  explicit ConnCore(std::string peer)
      : peer_(std::move(peer)), id_(NextId()), executor_("stagger-inp-cli") {}

  const std::string& peer() const { return peer_; }
  // Message::peer of its requests: unique in the process, never reused.
  uint64_t id() const { return id_; }

  // Registers a call; returns its id, or 0 (and fails `done`) when broken.
  uint64_t Begin(ReplyCallback done) {
    Status broken;
    {
      absl::MutexLock l(&mu_);
      if (broken_.ok()) {
        uint64_t id = next_id_++;
        pending_.emplace(id, std::move(done));
        return id;
      }
      broken = broken_;
    }
    Dispatch(std::move(done), std::move(broken));
    return 0;
  }

  // Completes call `id` once; later completions are dropped.
  void Complete(uint64_t id, Result<Message> outcome) {
    ReplyCallback done;
    {
      absl::MutexLock l(&mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      done = std::move(it->second);
      pending_.erase(it);
    }
    Dispatch(std::move(done), std::move(outcome));
  }

  // Fails every pending call and every later one with `why`.
  void Break(Status why) {
    std::map<uint64_t, ReplyCallback> calls;
    {
      absl::MutexLock l(&mu_);
      if (broken_.ok()) broken_ = std::move(why);
      why = broken_;
      calls.swap(pending_);
    }
    for (auto& [id, done] : calls) Dispatch(std::move(done), why);
  }

  // Runs the callbacks still queued, then ends the dispatcher thread.
  void Shutdown() { executor_.Stop(SerialExecutor::Pending::kRun); }

  // Runs `task` on the dispatcher thread, in order with the replies.
  void Post(std::function<void()> task) {
    auto shared = std::make_shared<std::function<void()>>(std::move(task));
    if (!executor_.Post([shared] { (*shared)(); })) (*shared)();
  }

  void Dispatch(ReplyCallback done, Result<Message> outcome) {
    auto shared = std::make_shared<std::pair<ReplyCallback, Result<Message>>>(
        std::move(done), std::move(outcome));
    if (!executor_.Post(
            [shared] { shared->first(std::move(shared->second)); })) {
      // Only while the connection is being destroyed; no dispatcher left.
      shared->first(std::move(shared->second));
    }
  }

 private:
  static uint64_t NextId() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1);
  }

  const std::string peer_;
  const uint64_t id_;
  SerialExecutor executor_;
  absl::Mutex mu_;
  Status broken_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, ReplyCallback> pending_ ABSL_GUARDED_BY(mu_);
};

class InProcReplyChannel final : public ReplyChannel {
 public:
  InProcReplyChannel(std::weak_ptr<ConnCore> conn, uint64_t id)
      : conn_(std::move(conn)), id_(id) {}
  ~InProcReplyChannel() override {
    if (!sent_) {
      Finish(absl::UnavailableError(
          "the handler dropped the request without replying"));
    }
  }
  void Send(uint16_t op, std::string header, Buffer payload) override {
    if (sent_) return;
    sent_ = true;
    Status valid = CheckSizes("reply", header.size(), payload.size());
    if (!valid.ok()) {
      Finish(absl::UnavailableError(valid.message()));
      return;
    }
    Message reply;
    reply.op = op;
    reply.header = std::move(header);
    reply.payload = std::move(payload);
    Finish(std::move(reply));
  }

 private:
  void Finish(Result<Message> outcome) {
    sent_ = true;
    if (auto conn = conn_.lock()) {
      if (!outcome.ok()) {
        outcome = WithContext(outcome.status(), conn->peer());
      }
      conn->Complete(id_, std::move(outcome));
    }
  }

  std::weak_ptr<ConnCore> conn_;
  const uint64_t id_;
  bool sent_ = false;
};

// The server side: a name, a handler and the dispatcher that runs it, and
// the requests waiting for their payload's admission.
class ListenerCore : public std::enable_shared_from_this<ListenerCore> {
 public:
  ListenerCore(std::string address, RequestHandler* handler,
               PullAdmission* admission)
      : address_(std::move(address)),
        handler_(handler),
        admission_(admission),
        executor_("stagger-inp-srv") {}

  const std::string& address() const { return address_; }

  void Attach(const std::shared_ptr<ConnCore>& conn) {
    absl::MutexLock l(&mu_);
    std::vector<std::weak_ptr<ConnCore>> live;
    for (auto& c : conns_) {
      if (!c.expired()) live.push_back(std::move(c));
    }
    live.push_back(conn);
    conns_.swap(live);
  }

  // Queues the request for the handler, after its payload's admission
  // when there is one; false once the listener closed.
  bool Deliver(std::weak_ptr<ConnCore> from, uint64_t peer, uint64_t id,
               Message request) {
    request.peer = peer;
    if (admission_ == nullptr || request.payload.empty()) {
      return Dispatch(std::move(from), id, std::move(request));
    }
    const size_t bytes = request.payload.size();
    uint64_t key;
    {
      absl::MutexLock l(&mu_);
      if (closed_) return false;
      key = next_key_++;
      admitting_.emplace(
          key, Admitting{std::move(from), peer, id, std::move(request)});
      asked_.insert(peer);
    }
    std::weak_ptr<ListenerCore> weak = weak_from_this();
    PullAdmission* const admission = admission_;
    admission->Request(peer, bytes, [weak, admission, key, peer, bytes] {
      auto charge = std::make_unique<AdmissionCharge>(admission, peer, bytes);
      if (auto core = weak.lock()) core->Admitted(key, std::move(charge));
    });
    return true;
  }

  // Connection `peer` closed: its requests waiting for admission are
  // dropped (their calls already failed) and the admission is told.
  void ConnectionClosed(uint64_t peer) {
    std::vector<Admitting> dropped;
    bool asked;
    {
      absl::MutexLock l(&mu_);
      for (auto it = admitting_.begin(); it != admitting_.end();) {
        if (it->second.peer == peer) {
          dropped.push_back(std::move(it->second));
          it = admitting_.erase(it);
        } else {
          ++it;
        }
      }
      asked = asked_.erase(peer) != 0;
    }
    dropped.clear();
    if (asked) admission_->PeerGone(peer);
  }

  // Stops dispatching (a handler already running finishes first), drops
  // the requests waiting for admission and fails the calls of every
  // attached connection.
  void Close() {
    std::map<uint64_t, Admitting> dropped;
    std::unordered_set<uint64_t> asked;
    {
      absl::MutexLock l(&mu_);
      closed_ = true;
      dropped.swap(admitting_);
      asked.swap(asked_);
    }
    executor_.Stop(SerialExecutor::Pending::kDiscard);
    dropped.clear();
    for (uint64_t peer : asked) admission_->PeerGone(peer);
    std::vector<std::weak_ptr<ConnCore>> conns;
    {
      absl::MutexLock l(&mu_);
      conns.swap(conns_);
    }
    for (auto& weak : conns) {
      if (auto conn = weak.lock()) {
        conn->Break(absl::UnavailableError(
            absl::StrCat(address_, ": the listener went away")));
      }
    }
  }

 private:
  struct Admitting {
    std::weak_ptr<ConnCore> from;
    uint64_t peer = 0;
    uint64_t id = 0;
    Message request;
  };

  bool Dispatch(std::weak_ptr<ConnCore> from, uint64_t id, Message request) {
    return executor_.Post([this, from = std::move(from), id,
                           request = std::move(request)]() mutable {
      handler_->OnRequest(std::move(request),
                          std::make_unique<InProcReplyChannel>(from, id));
    });
  }

  // The grant for request `key` came (on any thread).
  void Admitted(uint64_t key, std::unique_ptr<Buffer::Attachment> charge) {
    Admitting a;
    {
      absl::MutexLock l(&mu_);
      auto it = admitting_.find(key);
      if (it == admitting_.end()) return;  // dropped; the charge goes back
      a = std::move(it->second);
      admitting_.erase(it);
    }
    a.request.payload.Attach(std::move(charge));
    // Refused only once Close() began, which fails the call; the request
    // and its charge are dropped.
    Dispatch(std::move(a.from), a.id, std::move(a.request));
  }

  const std::string address_;
  RequestHandler* const handler_;
  PullAdmission* const admission_;
  SerialExecutor executor_;
  absl::Mutex mu_;
  std::vector<std::weak_ptr<ConnCore>> conns_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Admitting> admitting_ ABSL_GUARDED_BY(mu_);
  std::unordered_set<uint64_t> asked_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  static Registry& Get() {
    static Registry* registry = new Registry();  // never destroyed
    return *registry;
  }

  Result<std::shared_ptr<ListenerCore>> Add(std::string name,
                                            RequestHandler* handler,
                                            PullAdmission* admission) {
    absl::MutexLock l(&mu_);
    if (name.empty()) name = absl::StrCat("auto-", ++counter_);
    std::string address = std::string(kInProcScheme) + name;
    if (listeners_.count(name) != 0) {
      return absl::UnavailableError(
          absl::StrCat(address, " is already in use"));
    }
    auto core = std::make_shared<ListenerCore>(address, handler, admission);
    listeners_.emplace(std::move(name), core);
    return core;
  }

  void Remove(const std::string& address) {
    absl::MutexLock l(&mu_);
    listeners_.erase(address.substr(kInProcScheme.size()));
  }

  std::shared_ptr<ListenerCore> Find(const std::string& name) {
    absl::MutexLock l(&mu_);
    auto it = listeners_.find(name);
    return it == listeners_.end() ? nullptr : it->second;
  }

 private:
  absl::Mutex mu_;
  uint64_t counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::shared_ptr<ListenerCore>> listeners_
      ABSL_GUARDED_BY(mu_);
};

class InProcListener final : public Listener {
 public:
  explicit InProcListener(std::shared_ptr<ListenerCore> core)
      : core_(std::move(core)) {}
  ~InProcListener() override {
    Registry::Get().Remove(core_->address());
    core_->Close();
  }
  std::string address() const override { return core_->address(); }

 private:
  std::shared_ptr<ListenerCore> core_;
};

class InProcConnection final : public Connection {
 public:
  InProcConnection(std::shared_ptr<ConnCore> core,
                   std::weak_ptr<ListenerCore> listener)
      : core_(std::move(core)), listener_(std::move(listener)) {}
  ~InProcConnection() override {
    core_->Break(absl::UnavailableError(
        absl::StrCat("connection to ", core_->peer(), " was closed")));
    if (auto listener = listener_.lock())
      listener->ConnectionClosed(core_->id());
    core_->Shutdown();
  }

  using Connection::Call;
  void Call(uint16_t op, std::string_view header, std::string_view payload,
            ReplyCallback done, SentCallback sent) override {
    Status valid = CheckSizes("message", header.size(), payload.size());
    if (!valid.ok()) {
      core_->Dispatch(std::move(done), valid);
      return;
    }
    uint64_t id = core_->Begin(std::move(done));
    if (id == 0) return;
    Message request;
    request.op = op;
    request.header = std::string(header);
    request.payload = Buffer::CopyOf(payload);
    // Posted before the request is delivered, so it runs before any reply.
    if (sent) core_->Post(std::move(sent));
    auto listener = listener_.lock();
    if (listener == nullptr ||
        !listener->Deliver(core_, core_->id(), id, std::move(request))) {
      core_->Break(absl::UnavailableError(
          absl::StrCat(core_->peer(), ": the listener went away")));
    }
  }

  std::string peer() const override { return core_->peer(); }
  DataPath path() const override { return {"inproc", "inproc"}; }

 private:
  std::shared_ptr<ConnCore> core_;
  std::weak_ptr<ListenerCore> listener_;
};

Result<std::string> NameOf(const std::string& address) {
  if (address.compare(0, kInProcScheme.size(), kInProcScheme) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad address \"", address, "\": expected \"inproc:NAME\""));
  }
  return address.substr(kInProcScheme.size());
}

class InProcTransport final : public Transport {
 public:
  Result<std::unique_ptr<Listener>> Listen(
      const std::string& address, RequestHandler* handler,
      const ListenOptions& options) override {
    if (handler == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("listening on ", address, ": no request handler"));
    }
    STAGGER_ASSIGN_OR_RETURN(std::string name, NameOf(address));
    STAGGER_ASSIGN_OR_RETURN(
        auto core, Registry::Get().Add(name, handler, options.admission));
    return std::unique_ptr<Listener>(new InProcListener(std::move(core)));
  }

  Result<std::unique_ptr<Connection>> Connect(
      const std::string& address) override {
    STAGGER_ASSIGN_OR_RETURN(std::string name, NameOf(address));
    std::shared_ptr<ListenerCore> listener =
        name.empty() ? nullptr : Registry::Get().Find(name);
    if (listener == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("connecting to ", address, ": nobody listens"));
    }
    auto core = std::make_shared<ConnCore>(address);
    listener->Attach(core);
    return std::unique_ptr<Connection>(
        new InProcConnection(std::move(core), listener));
  }
};

}  // namespace

std::unique_ptr<Transport> NewInProcTransport() {
  return std::make_unique<InProcTransport>();
}

}  // namespace stagger::transport
