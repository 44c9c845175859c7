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
};

// Called once per Call() with the reply, or with UNAVAILABLE when the peer
// is gone or the connection failed. Runs on a transport thread: it must not
// block for long; hand heavy work elsewhere.
using ReplyCallback = std::function<void(Result<Message>)>;

// Client side of one connection. Thread-safe.
class Connection {
 public:
  virtual ~Connection() = default;

  // Sends {op, header, payload} and calls `done` exactly once. `payload` is
  // borrowed: it must stay valid and unchanged until `done` runs.
  // INVALID_ARGUMENT (through `done`) when the header or payload is too big.
  virtual void Call(uint16_t op, std::string_view header,
                    std::string_view payload, ReplyCallback done) = 0;

  // Call() and wait for the reply.
  Result<Message> CallSync(uint16_t op, std::string_view header,
                           std::string_view payload);

  // "host:port" (UCX) or "inproc:name" of the peer.
  virtual std::string peer() const = 0;
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

// A listening endpoint; destroying it stops accepting and closes its
// connections (requests in flight get no reply).
class Listener {
 public:
  virtual ~Listener() = default;
  // "host:port" actually bound (port resolved when 0 was asked for), or
  // "inproc:name".
  virtual std::string address() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Listens on `address` ("host:port", port 0 picks a free one; or
  // "inproc:name"). `handler` must outlive the listener.
  virtual Result<std::unique_ptr<Listener>> Listen(const std::string& address,
                                                   RequestHandler* handler) = 0;
  // Connects to a listener's address. UNAVAILABLE when nobody listens.
  virtual Result<std::unique_ptr<Connection>> Connect(
      const std::string& address) = 0;
};

// Splits "host:port"; INVALID_ARGUMENT naming the text when malformed.
Result<std::pair<std::string, uint16_t>> SplitHostPort(std::string_view addr);

}  // namespace stagger::transport

#endif  // STAGGER_TRANSPORT_TRANSPORT_H_
