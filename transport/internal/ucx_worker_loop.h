// UcxWorkerLoop: one ucp_worker driven by one dedicated progress thread.
//
// The worker runs in UCS_THREAD_MODE_SINGLE: only the progress thread calls
// into it. Other threads hand work over with Post(), which queues a task under
// a mutex and wakes the thread with ucp_worker_signal(). When idle the thread
// sleeps in poll() on the worker's event fd (progress until 0, arm, wait), so
// an idle loop costs no CPU.
//
// The loop owns the worker, the endpoints created on it (by id; an id is
// never reused, so a stale id is simply "not alive"), in-flight sends and
// rendezvous pulls. It speaks the framing of frame.h: incoming active
// messages are validated, eager data is copied inside the UCX callback,
// rendezvous data is pulled with ucp_am_recv_data_nbx into a 4 KiB-aligned
// Buffer, and each complete message is handed to OnMessage().
//
// With a PullAdmission (UcxLoopOptions::admission; listeners only), each
// rendezvous payload waits for its grant before it may be pulled, and its
// charge travels with the payload Buffer (ucx_pull_admission.cc).
//
// Subclasses (the server and client loops) implement the hooks. Hooks and
// deferred work always run on the progress thread and never inside a UCX
// callback, so they may send, close endpoints and call user code.
//
// Lifetime: create with std::shared_ptr, Init(), then Start(). The thread
// holds a reference until it exits. Stop() ends it: the last posted tasks
// run, OnShutdown() runs, endpoints are closed (bounded by close_timeout),
// the worker is destroyed, then OnStopped() runs and leftover sends complete
// with UNAVAILABLE.
#ifndef STAGGER_TRANSPORT_INTERNAL_UCX_WORKER_LOOP_H_
#define STAGGER_TRANSPORT_INTERNAL_UCX_WORKER_LOOP_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "stagger/status.h"
#include "transport/buffer.h"
#include "transport/buffer_pool.h"
#include "transport/internal/frame.h"
#include "transport/internal/ucx_handles.h"
#include "transport/transport.h"

namespace stagger::transport_internal {

struct UcxLoopOptions {
  // Payloads at least this large are sent with forced rendezvous.
  size_t rndv_threshold = 64 << 10;
  // Rendezvous payload bytes pulled at once; more wait their turn. A single
  // message larger than this is still pulled when nothing else is.
  size_t max_inflight_pull_bytes = 512ull << 20;
  // How long shutdown waits for endpoints and requests to finish.
  std::chrono::milliseconds close_timeout{2000};
  // Not owned; asked before each rendezvous pull (transport.h). nullptr:
  // pull as soon as max_inflight_pull_bytes allows.
  transport::PullAdmission* admission = nullptr;
  // Pulled payloads start this many bytes into their aligned allocation
  // (transport::ListenOptions::payload_headroom).
  size_t payload_headroom = 0;
  // Where pulled payloads come from (transport/buffer_pool.h), shared by
  // every loop of one transport; nullptr: a pool of this loop's own,
  // keeping up to pull_buffer_cache_bytes.
  std::shared_ptr<transport::BufferPool> pull_buffers;
  size_t pull_buffer_cache_bytes = 128ull << 20;
};

class UcxWorkerLoop : public std::enable_shared_from_this<UcxWorkerLoop> {
 public:
  using Task = absl::AnyInvocable<void()>;

  virtual ~UcxWorkerLoop();
  UcxWorkerLoop(const UcxWorkerLoop&) = delete;
  UcxWorkerLoop& operator=(const UcxWorkerLoop&) = delete;

  // Queues `task` for the progress thread. Returns false, without running
  // it, once the loop has stopped accepting work. Any thread.
  bool Post(Task task);

  // Ends the progress thread (see the file comment) and waits for it, unless
  // called on the progress thread itself: then the thread finishes the
  // shutdown after the current callback returns. Idempotent.
  void Stop();

  bool OnLoopThread() const {
    return std::this_thread::get_id() == thread_id_.load();
  }

 protected:
  UcxWorkerLoop(std::shared_ptr<UcxContext> context, UcxLoopOptions options,
                std::string thread_name);

  // Creates the worker and registers the AM handler. Before Start().
  Status Init();
  // Starts the progress thread. From then on only that thread touches the
  // worker.
  void Start();

  // ---- Progress thread only (or the creator before Start()). ----
  ucp_worker_h worker() const { return worker_.get(); }
  const UcxLoopOptions& options() const { return options_; }
  bool stopping() const { return stopping_; }

  // Error handler to put in ucp_ep_params_t for endpoints of this loop.
  ucp_err_handler_t ErrorHandler();
  // Takes ownership of `ep`; returns its id (never 0).
  uint64_t AddEndpoint(ucp_ep_h ep, std::string peer);
  bool EndpointAlive(uint64_t ep_id) const;
  // The live endpoint's handle; nullptr when it is gone.
  ucp_ep_h EndpointHandle(uint64_t ep_id) const;
  // The peer's "host:port", or "" when the endpoint is gone.
  std::string PeerOf(uint64_t ep_id) const;
  // Closes the endpoint (forcefully, or after flushing), and then runs
  // OnEndpointDown(ep_id, why). No-op when it is already gone.
  void CloseEndpoint(uint64_t ep_id, Status why, bool force);
  // Tells the peer of `ep_id` why it is being dropped (a kClose frame) and
  // closes the endpoint once that has been sent. For a peer that broke the
  // protocol.
  void Expel(uint64_t ep_id, Status why);
  // An endpoint of this loop's own (error mode PEER, its error handler) to
  // the worker at `address` (its bytes), not yet in any table; UNAVAILABLE
  // naming `whose` when UCX refuses. A peer that connected to this worker
  // is answered on such an endpoint: the one UCX made for it is destroyed
  // by UCX when the peer fails, without a callback.
  Result<ucp_ep_h> ConnectTo(const std::string& address,
                             absl::string_view whose);
  // Asks the progress thread to end the loop (as Stop() does) without
  // waiting for it; for hooks, which run on that thread.
  void RequestStop();
  // Starts ucp_ep_close_nbx on an endpoint that is in no table.
  void CloseHandle(ucp_ep_h ep, bool force);

  // Sends a frame of `kind` with `header` and `payload` to `ep_id`.
  // `payload` must stay valid until `done` runs; `keep` (which `payload` may
  // point into) is owned by the send until then. `done` runs exactly once,
  // on the progress thread, never inside the call, with OK or the failure.
  using SendDone = absl::AnyInvocable<void(Status)>;
  void Send(uint64_t ep_id, FrameKind kind, uint16_t op, uint64_t request_id,
            std::string_view header, std::string_view payload,
            transport::Buffer keep, SendDone done);

  // Runs `task` on the progress thread after the current UCX progress call
  // returns. For use inside UCX callbacks.
  void Defer(Task task) { deferred_.push_back(std::move(task)); }

  // ---- Hooks (progress thread, outside UCX callbacks). ----
  // A complete, validated message from a live endpoint.
  virtual void OnMessage(uint64_t ep_id, const Frame& frame, std::string header,
                         transport::Buffer payload) = 0;
  // The endpoint failed or was closed; it is already gone.
  virtual void OnEndpointDown(uint64_t ep_id, const Status& why) {}
  // A kHello frame arrived from an endpoint in no table (one
  // UCX created for a peer that connected to this worker's address; not
  // ours to keep or close); `header` is its message header. The default
  // ignores it.
  virtual void OnStrayHello(FrameKind kind, std::string header) {}
  // A rendezvous payload of `length` bytes is about to be pulled for a
  // message of `frame` (its header in the AM header): a Buffer to pull it
  // into instead of one from the pool (Buffer::Borrow), or an empty one.
  virtual transport::Buffer PullInto(const Frame& frame,
                                     const std::string& header, size_t length) {
    return transport::Buffer();
  }
  // A pull into a PullInto buffer ended (landed, failed, or dropped): UCX
  // writes there no more.
  virtual void PullEnded(const Frame& frame) {}
  // Shutdown began: no more posted tasks will run; endpoints still open.
  virtual void OnShutdown() {}
  // The worker is destroyed; last chance to complete outstanding work.
  virtual void OnStopped() {}

 private:
  struct SendOp;
  // A rendezvous payload: waiting for admission, waiting for pull room,
  // being pulled, then delivered.
  struct PullOp {
    UcxWorkerLoop* loop;
    uint64_t id;
    uint64_t ep_id;
    Frame frame;
    std::string header;
    void* desc;
    size_t length;
    transport::Buffer data;
    // The admission charge for `length` bytes, once granted; released when
    // the op (or, after delivery, the payload Buffer) is destroyed.
    std::unique_ptr<transport::Buffer::Attachment> charge;
  };
  struct Endpoint {
    ucp_ep_h ep;
    std::string peer;
  };

  void ThreadMain();
  // Removes live endpoint `ep_id` and its handles from the tables and
  // returns it; the handles are still open.
  Endpoint Forget(uint64_t ep_id);
  // Runs posted tasks; returns true when any ran. Sets *stop when asked.
  bool RunPosted(bool* stop);
  bool RunDeferred();
  void WaitForEvents(int timeout_ms);
  void Shutdown();
  // Sends a kClose to each of `open` (id, peer) and progresses until they
  // left or a short while passed.
  void SayGoodbye(const std::vector<std::pair<uint64_t, std::string>>& open);
  bool StartPulls();  // true when it started or dropped any
  void FinishSend(SendOp* op, Status status);
  void FinishPull(PullOp* op, Status status);
  void Deliver(uint64_t ep_id, const Frame& frame, std::string header,
               transport::Buffer payload);
  // The endpoint left the tables: drop what it still waits for, then tell
  // the subclass.
  void EndpointGone(uint64_t ep_id, const Status& why);

  // ---- Pull admission (ucx_pull_admission.cc). ----
  // Queues a new rendezvous payload: for admission, or for StartPulls().
  void QueuePull(std::unique_ptr<PullOp> op);
  // Asks the admission for op `op_id`'s bytes.
  void AskAdmission(uint64_t op_id);
  // The grant for op `op_id` arrived (posted by the grant callback).
  void Admitted(uint64_t op_id,
                std::unique_ptr<transport::Buffer::Attachment> charge);
  // Drops the ops of `ep_id` still waiting for admission and reports the
  // peer gone to the admission.
  void DropPeerAdmissions(uint64_t ep_id);
  // Shutdown: the same for every peer.
  void DropAllAdmissions();

  ucs_status_t HandleAm(const void* header, size_t header_length, void* data,
                        size_t length, const ucp_am_recv_param_t* param);
  void HandleEndpointError(ucp_ep_h ep, ucs_status_t status);

  static ucs_status_t AmCallback(void* arg, const void* header,
                                 size_t header_length, void* data,
                                 size_t length,
                                 const ucp_am_recv_param_t* param);
  static void EndpointErrorCallback(void* arg, ucp_ep_h ep,
                                    ucs_status_t status);
  static void SendCallback(void* request, ucs_status_t status, void* user_data);
  static void PullCallback(void* request, ucs_status_t status, size_t length,
                           void* user_data);
  static void CloseCallback(void* request, ucs_status_t status,
                            void* user_data);

  const std::shared_ptr<UcxContext> context_;
  const UcxLoopOptions options_;
  const std::string thread_name_;
  WorkerPtr worker_;
  int event_fd_ = -1;
  size_t max_am_header_ = 0;

  // Shared with posting threads.
  absl::Mutex mu_;
  std::vector<Task> posted_ ABSL_GUARDED_BY(mu_);
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;

  absl::Mutex join_mu_;  // serialises Stop()'s join/detach
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};

  // Progress thread only.
  bool stopping_ = false;
  std::vector<Task> deferred_;
  uint64_t next_ep_id_ = 1;
  std::unordered_map<uint64_t, Endpoint> endpoints_;
  std::unordered_map<ucp_ep_h, uint64_t> ids_;
  size_t closing_ = 0;  // ep close requests in flight
  uint64_t next_op_id_ = 1;
  std::unordered_map<SendOp*, std::unique_ptr<SendOp>> sends_;
  uint64_t next_pull_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<PullOp>> pulls_admitting_;
  std::unordered_set<uint64_t> admission_peers_;  // asked at least once
  std::deque<std::unique_ptr<PullOp>> pulls_waiting_;
  std::unordered_map<PullOp*, std::unique_ptr<PullOp>> pulls_;
  size_t pull_bytes_ = 0;
  // Where pulled payloads come from and go back to.
  const std::shared_ptr<transport::BufferPool> pull_buffers_;
};

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_UCX_WORKER_LOOP_H_
