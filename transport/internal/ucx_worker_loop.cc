#include "transport/internal/ucx_worker_loop.h"

#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/internal/ucx_status.h"
#include "transport/transport.h"

namespace stagger::transport_internal {
namespace {

using transport::Buffer;

Status Unavailable(absl::string_view peer, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(peer, ": ", what));
}

}  // namespace

struct UcxWorkerLoop::SendOp {
  UcxWorkerLoop* loop;
  std::string am_header;  // frame (+ message header); UCX 1.13 reads it
                          // until the send completes
  Buffer keep;
  SendDone done;
};

UcxWorkerLoop::UcxWorkerLoop(std::shared_ptr<UcxContext> context,
                             UcxLoopOptions options, std::string thread_name)
    : context_(std::move(context)),
      options_(options),
      thread_name_(std::move(thread_name)),
      pull_buffers_(options.pull_buffers != nullptr
                        ? options.pull_buffers
                        : transport::BufferPool::Create(
                              options.pull_buffer_cache_bytes)) {}

UcxWorkerLoop::~UcxWorkerLoop() {
  // The owner stops the loop; the thread holds a reference until it exits,
  // so by now it is gone (or was never started).
  if (thread_.joinable()) thread_.detach();
}

Status UcxWorkerLoop::Init() {
  STAGGER_ASSIGN_OR_RETURN(worker_, CreateWorker(*context_));
  ucs_status_t st = ucp_worker_get_efd(worker_.get(), &event_fd_);
  if (st != UCS_OK) return FromUcs(st, "getting the UCX worker event fd");

  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  st = ucp_worker_query(worker_.get(), &attr);
  if (st != UCS_OK) return FromUcs(st, "querying the UCX worker");
  max_am_header_ = attr.max_am_header;
  if (max_am_header_ < kFrameBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "UCX worker allows only ", max_am_header_,
        " AM header bytes; the transport frame needs ", kFrameBytes));
  }

  ucp_am_handler_param_t param{};
  param.field_mask =
      UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  param.id = kAmId;
  param.flags = UCP_AM_FLAG_WHOLE_MSG;
  param.cb = &UcxWorkerLoop::AmCallback;
  param.arg = this;
  st = ucp_worker_set_am_recv_handler(worker_.get(), &param);
  return FromUcs(st, "registering the UCX AM handler");
}

void UcxWorkerLoop::Start() {
  absl::MutexLock l(&join_mu_);
  thread_ = std::thread([self = shared_from_this()] { self->ThreadMain(); });
  thread_id_.store(thread_.get_id());
}

bool UcxWorkerLoop::Post(Task task) {
  absl::MutexLock l(&mu_);
  if (!accepting_) return false;
  bool wake = posted_.empty();
  posted_.push_back(std::move(task));
  // Signalling under mu_ keeps the worker alive: it is destroyed only after
  // accepting_ turned false.
  if (wake) ucp_worker_signal(worker_.get());
  return true;
}

void UcxWorkerLoop::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (!stop_requested_) {
      stop_requested_ = true;
      if (accepting_ && worker_ != nullptr) ucp_worker_signal(worker_.get());
    }
  }
  absl::MutexLock l(&join_mu_);
  if (!thread_.joinable()) return;
  if (OnLoopThread()) {
    // Stopped from a hook or user callback: the thread ends the loop after
    // this callback returns and keeps this object alive until then.
    thread_.detach();
  } else {
    thread_.join();
  }
}

void UcxWorkerLoop::RequestStop() {
  absl::MutexLock l(&mu_);
  stop_requested_ = true;
  if (accepting_ && worker_ != nullptr) ucp_worker_signal(worker_.get());
}

void UcxWorkerLoop::ThreadMain() {
  thread_id_.store(std::this_thread::get_id());  // Start() may not have yet
  pthread_setname_np(pthread_self(), thread_name_.substr(0, 15).c_str());
  bool stop = false;
  for (;;) {
    bool worked = RunPosted(&stop);
    while (ucp_worker_progress(worker_.get()) != 0) worked = true;
    worked |= RunDeferred();
    if (stop) break;
    if (worked) continue;  // what we just did may need progress
    ucs_status_t st = ucp_worker_arm(worker_.get());
    if (st == UCS_ERR_BUSY) continue;  // events (or a signal) are pending
    if (st != UCS_OK) {
      // Cannot sleep safely; poll with a timeout instead of spinning.
      LogWarning(FromUcs(st, "arming the UCX worker").message());
      WaitForEvents(10);
      continue;
    }
    WaitForEvents(-1);
  }
  Shutdown();
}

bool UcxWorkerLoop::RunPosted(bool* stop) {
  std::vector<Task> tasks;
  {
    absl::MutexLock l(&mu_);
    tasks.swap(posted_);
    *stop = stop_requested_;
  }
  for (Task& t : tasks) t();
  return !tasks.empty();
}

bool UcxWorkerLoop::RunDeferred() {
  bool any = false;
  // Deferred tasks may defer more, and starting a pull may complete it at
  // once; run until nothing is left.
  for (;;) {
    if (!pulls_waiting_.empty()) any |= StartPulls();
    if (deferred_.empty()) return any;
    std::vector<Task> tasks;
    tasks.swap(deferred_);
    for (Task& t : tasks) t();
    any = true;
  }
}

void UcxWorkerLoop::WaitForEvents(int timeout_ms) {
  pollfd pfd{event_fd_, POLLIN, 0};
  int rc = poll(&pfd, 1, timeout_ms);
  if (rc < 0 && errno != EINTR) {
    LogWarning(absl::StrCat("poll on the UCX event fd failed: errno ", errno));
  }
}

void UcxWorkerLoop::SayGoodbye(
    const std::vector<std::pair<uint64_t, std::string>>& open) {
  // A peer connected through a worker address hears nothing of a forced
  // close while this process lives: tell it first, waiting a little for
  // the frames to leave (a peer that does not read them learns later).
  auto left = std::make_shared<size_t>(0);
  for (const auto& [id, peer] : open) {
    ++*left;
    Send(id, FrameKind::kClose, 0, 0, "shutting down", {}, Buffer(),
         [left](Status) { --*left; });
  }
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::min<std::chrono::milliseconds>(options_.close_timeout,
                                          std::chrono::milliseconds(200));
  while (*left > 0 && std::chrono::steady_clock::now() < deadline) {
    while (ucp_worker_progress(worker()) != 0) {
    }
    RunDeferred();
    if (*left > 0 && ucp_worker_arm(worker()) == UCS_OK) WaitForEvents(10);
  }
}

void UcxWorkerLoop::Shutdown() {
  std::vector<Task> last;
  {
    absl::MutexLock l(&mu_);
    accepting_ = false;
    last.swap(posted_);
  }
  for (Task& t : last) t();
  stopping_ = true;
  OnShutdown();

  // Rendezvous data nobody will read: release it (the sender completes).
  // Every peer is reported gone first, so that the charges returned below
  // do not grant requests of peers that are going away anyway.
  DropAllAdmissions();
  for (auto& op : pulls_waiting_) ucp_am_data_release(worker(), op->desc);
  pulls_waiting_.clear();

  // Forceful close: a flushing close of an endpoint whose peer never
  // answers does not complete, and UCX 1.13 aborts when a worker is
  // destroyed with requests still pending on such an endpoint. Forcing
  // purges them (their sends complete with an error) and the peer sees the
  // connection reset, which is what a going-away listener or connection
  // means anyway.
  std::vector<std::pair<uint64_t, std::string>> open;
  for (const auto& [id, ep] : endpoints_) open.emplace_back(id, ep.peer);
  SayGoodbye(open);
  for (const auto& [id, peer] : open) {
    CloseEndpoint(
        id, Unavailable(absl::StrCat("connection to ", peer), "closed locally"),
        /*force=*/true);
  }

  const auto deadline =
      std::chrono::steady_clock::now() + options_.close_timeout;
  for (;;) {
    while (ucp_worker_progress(worker()) != 0) {
    }
    RunDeferred();
    if (closing_ == 0 && sends_.empty() && pulls_.empty()) break;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      LogWarning(absl::StrCat(thread_name_, ": gave up waiting for ", closing_,
                              " endpoint closes, ", sends_.size(),
                              " sends and ", pulls_.size(), " pulls"));
      break;
    }
    if (ucp_worker_arm(worker()) == UCS_OK) {
      WaitForEvents(static_cast<int>(std::min<int64_t>(left.count(), 100)));
    }
  }
  // Destroying the worker releases whatever is still open.
  worker_.reset();
  RunDeferred();

  for (auto& [ptr, op] : sends_) {
    if (op->done) op->done(absl::UnavailableError("the transport shut down"));
  }
  sends_.clear();
  pulls_.clear();
  deferred_.clear();
  OnStopped();
}

ucp_err_handler_t UcxWorkerLoop::ErrorHandler() {
  ucp_err_handler_t h;
  h.cb = &UcxWorkerLoop::EndpointErrorCallback;
  h.arg = this;
  return h;
}

uint64_t UcxWorkerLoop::AddEndpoint(ucp_ep_h ep, std::string peer) {
  uint64_t id = next_ep_id_++;
  endpoints_.emplace(id, Endpoint{ep, std::move(peer)});
  ids_.emplace(ep, id);
  return id;
}

bool UcxWorkerLoop::EndpointAlive(uint64_t ep_id) const {
  return endpoints_.count(ep_id) != 0;
}

std::string UcxWorkerLoop::PeerOf(uint64_t ep_id) const {
  auto it = endpoints_.find(ep_id);
  return it == endpoints_.end() ? std::string() : it->second.peer;
}

UcxWorkerLoop::Endpoint UcxWorkerLoop::Forget(uint64_t ep_id) {
  auto it = endpoints_.find(ep_id);
  Endpoint gone = std::move(it->second);
  endpoints_.erase(it);
  ids_.erase(gone.ep);
  return gone;
}

ucp_ep_h UcxWorkerLoop::EndpointHandle(uint64_t ep_id) const {
  auto it = endpoints_.find(ep_id);
  return it == endpoints_.end() ? nullptr : it->second.ep;
}

void UcxWorkerLoop::CloseEndpoint(uint64_t ep_id, Status why, bool force) {
  if (!EndpointAlive(ep_id)) return;
  Endpoint gone = Forget(ep_id);
  CloseHandle(gone.ep, force);
  Defer([this, ep_id, why = std::move(why)] { EndpointGone(ep_id, why); });
}

Result<ucp_ep_h> UcxWorkerLoop::ConnectTo(const std::string& address,
                                          absl::string_view whose) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler = ErrorHandler();
  ucp_ep_h ep = nullptr;
  ucs_status_t st = ucp_ep_create(worker(), &params, &ep);
  if (st != UCS_OK) {
    Status why = FromUcs(st, absl::StrCat("connecting to ", whose));
    return why.code() == absl::StatusCode::kUnavailable
               ? why
               : absl::UnavailableError(why.message());
  }
  return ep;
}

void UcxWorkerLoop::Expel(uint64_t ep_id, Status why) {
  if (!EndpointAlive(ep_id)) return;
  std::string reason(why.message().substr(0, 1024));
  Send(ep_id, FrameKind::kClose, 0, 0, reason, {}, Buffer(),
       [this, ep_id, why](Status) {
         CloseEndpoint(ep_id, why, /*force=*/true);
       });
}

void UcxWorkerLoop::EndpointGone(uint64_t ep_id, const Status& why) {
  DropPeerAdmissions(ep_id);
  OnEndpointDown(ep_id, why);
}

void UcxWorkerLoop::CloseHandle(ucp_ep_h ep, bool force) {
  if (worker_ == nullptr) return;  // destroying the worker closed it
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  param.cb.send = &UcxWorkerLoop::CloseCallback;
  param.user_data = this;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(req)) ++closing_;
  // Errors closing a dead endpoint are expected and carry no news.
}

void UcxWorkerLoop::Send(uint64_t ep_id, FrameKind kind, uint16_t op,
                         uint64_t request_id, std::string_view header,
                         std::string_view payload, Buffer keep, SendDone done) {
  auto owned = std::make_unique<SendOp>();
  SendOp* s = owned.get();
  s->loop = this;
  s->done = std::move(done);
  s->keep = std::move(keep);

  auto it = endpoints_.find(ep_id);
  if (it == endpoints_.end()) {
    Defer([s = std::move(owned)]() mutable {
      s->done(absl::UnavailableError("the connection is closed"));
    });
    return;
  }

  Frame frame;
  frame.kind = kind;
  frame.op = op;
  frame.request_id = request_id;
  frame.header_len = static_cast<uint32_t>(header.size());
  frame.payload_len = payload.size();
  if (kFrameBytes + header.size() <= max_am_header_) {
    s->am_header.assign(kFrameBytes, '\0');
    s->am_header.append(header);
  } else {
    // The header does not fit UCX's AM header limit: it travels in front of
    // the payload, at the cost of one copy on each side.
    frame.flags |= kFrameHeaderInData;
    s->am_header.assign(kFrameBytes, '\0');
    Buffer joined(header.size() + payload.size());
    std::memcpy(joined.data(), header.data(), header.size());
    if (!payload.empty()) {
      std::memcpy(joined.data() + header.size(), payload.data(),
                  payload.size());
    }
    s->keep = std::move(joined);
    payload = s->keep.view();
  }
  EncodeFrame(frame, s->am_header.data());

  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &UcxWorkerLoop::SendCallback;
  param.user_data = s;
  param.flags = UCP_AM_SEND_FLAG_REPLY;
  if (payload.size() >= options_.rndv_threshold) {
    param.flags |= UCP_AM_SEND_FLAG_RNDV;
  }
  ucs_status_ptr_t req = ucp_am_send_nbx(
      it->second.ep, kAmId, s->am_header.data(), s->am_header.size(),
      payload.data(), payload.size(), &param);
  if (UCS_PTR_IS_PTR(req)) {
    sends_.emplace(s, std::move(owned));
    return;
  }
  Status st = UCS_PTR_IS_ERR(req)
                  ? FromUcs(UCS_PTR_STATUS(req),
                            absl::StrCat("sending to ", it->second.peer))
                  : absl::OkStatus();
  Defer([s = std::move(owned), st]() mutable { s->done(st); });
}

void UcxWorkerLoop::FinishSend(SendOp* op, Status status) {
  auto it = sends_.find(op);
  if (it == sends_.end()) return;
  std::unique_ptr<SendOp> owned = std::move(it->second);
  sends_.erase(it);
  Defer([owned = std::move(owned), status]() mutable { owned->done(status); });
}

bool UcxWorkerLoop::StartPulls() {
  bool started = false;
  while (!pulls_waiting_.empty()) {
    PullOp* next = pulls_waiting_.front().get();
    if (pull_bytes_ != 0 &&
        pull_bytes_ + next->length > options_.max_inflight_pull_bytes) {
      break;  // admission: wait until earlier pulls land
    }
    std::unique_ptr<PullOp> op = std::move(pulls_waiting_.front());
    pulls_waiting_.pop_front();
    started = true;
    if (!EndpointAlive(op->ep_id)) {
      ucp_am_data_release(worker(), op->desc);
      continue;
    }
    // With the header in the data, the payload is copied out below anyway.
    if (op->frame.header_in_data()) {
      op->data = Buffer(op->length);
    } else {
      op->data = PullInto(op->frame, op->header, op->length);
      if (op->data.empty()) {
        op->data = pull_buffers_->Get(op->length, options_.payload_headroom);
      }
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.recv_am = &UcxWorkerLoop::PullCallback;
    param.user_data = op.get();
    param.datatype = ucp_dt_make_contig(1);
    ucs_status_ptr_t req = ucp_am_recv_data_nbx(
        worker(), op->desc, op->data.data(), op->length, &param);
    PullOp* raw = op.get();
    pull_bytes_ += op->length;
    pulls_.emplace(raw, std::move(op));
    if (!UCS_PTR_IS_PTR(req)) {
      FinishPull(raw, UCS_PTR_IS_ERR(req)
                          ? FromUcs(UCS_PTR_STATUS(req), "pulling a payload")
                          : absl::OkStatus());
    }
  }
  return started;
}

void UcxWorkerLoop::FinishPull(PullOp* raw, Status status) {
  auto it = pulls_.find(raw);
  if (it == pulls_.end()) return;
  std::unique_ptr<PullOp> op = std::move(it->second);
  pulls_.erase(it);
  pull_bytes_ -= op->length;
  if (op->data.borrowed()) {
    // Not here, in a UCX callback: after the progress call returns.
    Defer([this, frame = op->frame] { PullEnded(frame); });
  }
  if (!status.ok()) {
    // Without its payload the message is lost; fail the connection so the
    // requester hears about it instead of waiting forever.
    uint64_t ep_id = op->ep_id;
    Status why = Unavailable(PeerOf(ep_id), status.message());
    Defer([this, ep_id, why] { CloseEndpoint(ep_id, why, /*force=*/true); });
    return;
  }
  Defer([this, op = std::move(op)]() mutable {
    Buffer payload = std::move(op->data);
    if (op->frame.header_in_data()) {
      op->header.assign(payload.data(), op->frame.header_len);
      Buffer rest = Buffer::CopyOf(
          payload.view().substr(op->frame.header_len, op->frame.payload_len));
      payload = std::move(rest);
    }
    // The charge now lives as long as the bytes the handler holds.
    if (op->charge != nullptr) payload.Attach(std::move(op->charge));
    Deliver(op->ep_id, op->frame, std::move(op->header), std::move(payload));
  });
}

void UcxWorkerLoop::Deliver(uint64_t ep_id, const Frame& frame,
                            std::string header, Buffer payload) {
  if (stopping_ || !EndpointAlive(ep_id)) return;
  if (frame.kind == FrameKind::kClose) {
    CloseEndpoint(
        ep_id,
        Unavailable(PeerOf(ep_id), absl::StrCat("closed by the peer: ",
                                                header.substr(0, 1024))),
        /*force=*/true);
    return;
  }
  OnMessage(ep_id, frame, std::move(header), std::move(payload));
}

ucs_status_t UcxWorkerLoop::HandleAm(const void* header, size_t header_length,
                                     void* data, size_t length,
                                     const ucp_am_recv_param_t* param) {
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  uint64_t ep_id = 0;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0) {
    auto it = ids_.find(param->reply_ep);
    if (it != ids_.end()) ep_id = it->second;
  }
  if (ep_id == 0 && !stopping_ && !rndv &&
      (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0) {
    // A peer that connected to this worker's address introducing itself.
    // Anything else from an unknown endpoint is dropped.
    Result<Frame> hello = ParseFrame(header, header_length, length);
    if (hello.ok() && hello->kind == FrameKind::kHello &&
        !hello->header_in_data()) {
      std::string h(static_cast<const char*>(header) + kFrameBytes,
                    hello->header_len);
      const FrameKind kind = hello->kind;
      Defer([this, kind, h = std::move(h)]() mutable {
        OnStrayHello(kind, std::move(h));
      });
      return UCS_OK;
    }
  }
  if (ep_id == 0 || stopping_) {
    // From an endpoint we closed (or never accepted): drop it.
    return rndv ? UCS_ERR_CANCELED : UCS_OK;
  }
  Result<Frame> frame = ParseFrame(header, header_length, length);
  if (!frame.ok()) {
    Status why = Unavailable(PeerOf(ep_id), frame.status().message());
    LogWarning(absl::StrCat(why.message(), "; closing the connection"));
    Defer([this, ep_id, why] { Expel(ep_id, why); });
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  std::string msg_header;
  if (!frame->header_in_data()) {
    msg_header.assign(static_cast<const char*>(header) + kFrameBytes,
                      frame->header_len);
  }
  if (!rndv) {
    // Eager data lives only for the duration of this callback: copy it.
    const char* bytes = static_cast<const char*>(data);
    if (frame->header_in_data()) {
      msg_header.assign(bytes, frame->header_len);
      bytes += frame->header_len;
    }
    Buffer payload = Buffer::CopyOf(std::string_view(
        frame->payload_len == 0 ? "" : bytes, frame->payload_len));
    Defer([this, ep_id, f = *frame, h = std::move(msg_header),
           p = std::move(payload)]() mutable {
      Deliver(ep_id, f, std::move(h), std::move(p));
    });
    return UCS_OK;
  }
  auto op = std::make_unique<PullOp>();
  op->loop = this;
  op->id = next_pull_id_++;
  op->ep_id = ep_id;
  op->frame = *frame;
  op->header = std::move(msg_header);
  op->desc = data;
  op->length = length;
  QueuePull(std::move(op));
  return UCS_INPROGRESS;  // keep the descriptor; StartPulls() pulls it
}

void UcxWorkerLoop::HandleEndpointError(ucp_ep_h ep, ucs_status_t status) {
  auto it = ids_.find(ep);
  if (it == ids_.end()) return;  // already closed by us
  const uint64_t ep_id = it->second;
  Status why = FromUcs(status, absl::StrCat("connection to ", PeerOf(ep_id)));
  if (why.code() != absl::StatusCode::kUnavailable) {
    why = absl::UnavailableError(why.message());
  }
  // From now on nothing may use the endpoint, nor its other handle: forget
  // them at once. They may only be closed, forcefully, and not from inside
  // this callback.
  Endpoint gone = Forget(ep_id);
  Defer([this, gone, ep_id, why] {
    CloseHandle(gone.ep, /*force=*/true);
    EndpointGone(ep_id, why);
  });
}

ucs_status_t UcxWorkerLoop::AmCallback(void* arg, const void* header,
                                       size_t header_length, void* data,
                                       size_t length,
                                       const ucp_am_recv_param_t* param) {
  return static_cast<UcxWorkerLoop*>(arg)->HandleAm(header, header_length, data,
                                                    length, param);
}

void UcxWorkerLoop::EndpointErrorCallback(void* arg, ucp_ep_h ep,
                                          ucs_status_t status) {
  static_cast<UcxWorkerLoop*>(arg)->HandleEndpointError(ep, status);
}

void UcxWorkerLoop::SendCallback(void* request, ucs_status_t status,
                                 void* user_data) {
  auto* op = static_cast<SendOp*>(user_data);
  op->loop->FinishSend(op, FromUcs(status, "sending a message"));
  ucp_request_free(request);
}

void UcxWorkerLoop::PullCallback(void* request, ucs_status_t status,
                                 size_t length, void* user_data) {
  auto* op = static_cast<PullOp*>(user_data);
  if (status == UCS_OK && length != op->length)
    status = UCS_ERR_MESSAGE_TRUNCATED;
  op->loop->FinishPull(op, FromUcs(status, "pulling a payload"));
  ucp_request_free(request);
}

void UcxWorkerLoop::CloseCallback(void* request, ucs_status_t status,
                                  void* user_data) {
  --static_cast<UcxWorkerLoop*>(user_data)->closing_;
  ucp_request_free(request);
}

}  // namespace stagger::transport_internal
