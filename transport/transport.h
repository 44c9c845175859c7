// The data-plane transport: request/response messages with a small header
// and an optional bulk payload. Two implementations share this interface:
// UCX active messages (ucx_transport.h) and an in-process one for tests
// (inproc_transport.h). No UCX type appears above transport/.
//
// A message is {op, header, payload}: `op` is an application opcode, the
// header is small (at most kMaxHeaderBytes) and the payload is bulk bytes
// (UCX sends it with rendezvous when large, so the receiver pulls it).
#ifndef STAGGER_TRANSPORT_TRANSPORT_H_
#define STAGGER_TRANSPORT_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "stagger/status.h"
#include "transport/buffer.h"

namespace stagger::transport {

inline constexpr size_t kMaxHeaderBytes = 8192;
inline constexpr size_t kMaxPayloadBytes = 256ull << 20;

struct Message {
  uint16_t op = 0;
  std::string header;
  Buffer payload;
  // On a request: the connection it arrived on (and, on a connection
  // several callers share, the caller: ConnectShared), an id unique among
  // the listener's connections and never reused (the `peer` of
  // PullAdmission). 0 on replies.
  uint64_t peer = 0;
};

// Called once per Call() with the reply, or with UNAVAILABLE when the peer
// is gone or the connection failed. Runs on a transport thread: it must not
// block for long; hand heavy work elsewhere.
using ReplyCallback = std::function<void(Result<Message>)>;

// Called at most once per Call(), before its ReplyCallback, once the
// request's payload has left this side: UCX: the send completed (for a
// rendezvous payload, once the peer has pulled it); in-process: once it was
// copied, at the call. What a sender measures the wire with: a reply also
// waits for the peer's work. Same thread rules as ReplyCallback.
using SentCallback = std::function<void()>;

// How a connection's bytes travel, as "transport/device" names (UCX:
// "tcp/lo", "cma/memory", "rc_mlx5/mlx5_0:1"; in-process: "inproc"):
// `messages` carries requests, replies and small payloads, `payloads` the
// large ones (rendezvous). Several names are comma-separated; "" when not
// known.
struct DataPath {
  std::string messages;
  std::string payloads;
  // Payloads move by cross-memory attach between two processes of one
  // host (UCX's cma): one copy, no socket.
  bool cross_memory() const;
  // "payloads by cma/memory, messages by tcp/lo".
  std::string ToString() const;
};

// Where a reply's payload may land (Connection::CallInto): `size` bytes at
// `data`, when the payload is exactly `size` bytes long and `accept(header)`
// (the reply's message header) says so. Otherwise the payload arrives in a
// buffer of the transport's, as with Call.
struct ReplyInto {
  char* data = nullptr;
  size_t size = 0;
  std::function<bool(std::string_view header)> accept;
};

// Client side of one connection. Thread-safe.
class Connection {
 public:
  virtual ~Connection() = default;

  // Sends {op, header, payload} and calls `done` exactly once. `payload` is
  // borrowed: it must stay valid and unchanged until `done` runs.
  // INVALID_ARGUMENT (through `done`) when the header or payload is too big.
  void Call(uint16_t op, std::string_view header, std::string_view payload,
            ReplyCallback done) {
    Call(op, header, payload, std::move(done), nullptr);
  }
  // As above; `sent` (may be empty) reports when the payload has left.
  virtual void Call(uint16_t op, std::string_view header,
                    std::string_view payload, ReplyCallback done,
                    SentCallback sent) = 0;

  // Call() whose reply payload is received straight into `into` where the
  // transport can (UCX: a rendezvous payload is pulled there, no copy
  // after); the reply's Message::payload then borrows that memory
  // (Buffer::borrowed()). `into.data` must stay valid until `done` runs,
  // and until then nothing else may use it: the transport may write there
  // even when the reply fails in the end (a connection lost mid-pull).
  // `accept` runs on a transport thread. The default receives as Call does.
  virtual void CallInto(uint16_t op, std::string_view header,
                        std::string_view payload, ReplyCallback done,
                        ReplyInto into) {
    Call(op, header, payload, std::move(done), nullptr);
  }

  // Call() and wait for the reply.
  Result<Message> CallSync(uint16_t op, std::string_view header,
                           std::string_view payload);

  // True once the connection has failed or been closed by the peer: every
  // call from now on fails with UNAVAILABLE, and a new Connect() is the
  // way back. Any thread.
  virtual bool broken() const { return false; }

  // The address given to Connect(): "ucx:..." or "inproc:name".
  virtual std::string peer() const = 0;

  // How this connection's bytes travel, as UCX chose when it connected
  // (empty fields: not known).
  virtual DataPath path() const { return {}; }
};

// The server's handle on one request's reply. Send() exactly once, from any
// thread; if the requester has gone away the reply is dropped silently.
class ReplyChannel {
 public:
  virtual ~ReplyChannel() = default;
  virtual void Send(uint16_t op, std::string header, Buffer payload) = 0;
};

// Server-side request handler. OnRequest runs on the transport's progress
// thread: it must not block; queue the work and reply later.
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  virtual void OnRequest(Message request,
                         std::unique_ptr<ReplyChannel> reply) = 0;
};

// Admission of request payloads (docs/design.md §5): a Listener given one asks
// it before it takes in a request's payload, so the receiver decides when
// bytes move. UCX asks for rendezvous payloads (>= rndv_threshold) before
// pulling them; the in-process transport asks for every non-empty payload
// before handing the request to the handler. Requests without admitted
// bytes (eager UCX payloads, empty ones) do not wait.
//
// A granted payload's bytes stay charged to its peer until the Buffer the
// handler received (Message::payload) is destroyed, or, when the payload
// never reaches a handler (its peer went away, the listener shut down, the
// pull failed), until the transport drops it: either way Release() runs
// exactly once per grant. So the charge covers the bytes in memory and in
// whatever queue the handler hands the Buffer to.
//
// Thread-safety: implementations must be thread-safe. Request and PeerGone
// run on a transport thread (UCX: the listener's progress thread, never
// inside a UCX callback; in-process: the thread calling Call() or closing
// the connection); Release on any thread, including inside a grant and
// inside Request.
//
// Lifetime: must outlive the Listener and every Buffer it charged.
class PullAdmission {
 public:
  virtual ~PullAdmission() = default;
  // Asks for `bytes` of credit for a payload from connection `peer`.
  // `grant` runs at most once, on any thread, possibly inside Request; from
  // then on the bytes are charged until Release(peer, bytes). A grant that
  // is never going to come must simply never run (e.g. after PeerGone).
  virtual void Request(uint64_t peer, size_t bytes,
                       std::function<void()> grant) = 0;
  // Returns `bytes` granted to `peer`. May come after PeerGone(peer): bytes
  // of a gone peer can still be in the handler's queues.
  virtual void Release(uint64_t peer, size_t bytes) = 0;
  // `peer` disconnected (or the listener shut down): its requests that are
  // still queued will not be used; drop them. Called once per peer that
  // made a Request. A grant that races with it is released by the
  // transport.
  virtual void PeerGone(uint64_t peer) = 0;
};

struct ListenOptions {
  // Not owned; nullptr: payloads are taken in as they come (UCX still
  // bounds the bytes being pulled at once: max_inflight_pull_bytes).
  PullAdmission* admission = nullptr;
  // Received payloads are placed this many bytes into a 4 KiB-aligned
  // allocation (Buffer::WithHeadroom), so a handler can put a header in
  // front of them without moving the bytes. A hint: a transport may deliver
  // a payload without it (in-process payloads arrive as the caller's
  // Buffer).
  size_t payload_headroom = 0;
};

// A listening endpoint; destroying it stops accepting and closes its
// connections (requests in flight get no reply).
class Listener {
 public:
  virtual ~Listener() = default;
  // What Connect() takes: "ucx:" and the worker's address in hex (UCX), or
  // "inproc:name".
  virtual std::string address() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Listens on `address` ("ucx:" for UCX: at a new worker's address; or
  // "inproc:name", "inproc:" for a fresh name). `handler` must outlive the
  // listener.
  virtual Result<std::unique_ptr<Listener>> Listen(
      const std::string& address, RequestHandler* handler,
      const ListenOptions& options) = 0;
  Result<std::unique_ptr<Listener>> Listen(const std::string& address,
                                           RequestHandler* handler) {
    return Listen(address, handler, ListenOptions());
  }
  // Connects to a listener's address. UNAVAILABLE when nobody listens.
  virtual Result<std::unique_ptr<Connection>> Connect(
      const std::string& address) = 0;
  // As Connect, sharing one connection to `address` among every caller of
  // ConnectShared on this transport while it is open and not broken: the
  // listener sees one peer, and the process holds one endpoint and one
  // progress thread per address however many callers (ranks) it has. For
  // connections that bind nothing of their own on the listener (no
  // data-plane key). The default connects afresh.
  virtual Result<std::unique_ptr<Connection>> ConnectShared(
      const std::string& address) {
    return Connect(address);
  }
};

// Splits "host:port"; INVALID_ARGUMENT naming the text when malformed.
Result<std::pair<std::string, uint16_t>> SplitHostPort(std::string_view addr);

}  // namespace stagger::transport

#endif  // STAGGER_TRANSPORT_TRANSPORT_H_
