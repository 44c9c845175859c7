// Wire framing of one transport message (request, reply or handshake).
//
// Every UCX active message starts its AM header with a fixed 28-byte frame,
// little-endian:
//
//   offset size field
//        0    4 magic        kFrameMagic ("STG1"); also the format version
//        4    1 kind         FrameKind
//        5    1 flags        kFrameHeaderInData or 0
//        6    2 op           application opcode
//        8    4 header_len   message header bytes (<= kMaxHeaderBytes)
//       12    8 request_id   chosen by the requester, echoed in the reply;
//                            its top 24 bits are the flow (FlowOf)
//       20    8 payload_len  payload bytes (<= kMaxPayloadBytes)
//
// The message header follows the frame in the AM header, unless the worker's
// AM header limit is too small for it; then kFrameHeaderInData is set and the
// header bytes travel in front of the payload in the AM data.
//
// Thread-safety: pure functions.
#ifndef STAGGER_TRANSPORT_INTERNAL_FRAME_H_
#define STAGGER_TRANSPORT_INTERNAL_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "stagger/status.h"

namespace stagger::transport_internal {

// The UCX active-message id every frame travels under.
inline constexpr unsigned kAmId = 0x5354;
inline constexpr uint32_t kFrameMagic = 0x31475453;  // "STG1" little-endian
inline constexpr size_t kFrameBytes = 28;
inline constexpr uint8_t kFrameHeaderInData = 0x1;

enum class FrameKind : uint8_t {
  kRequest = 1,   // client -> server: a Call()
  kReply = 2,     // server -> client: the reply to request_id
  kNoReply = 3,   // server -> client: request_id will never get a reply
  kHello = 4,     // client -> server: connection handshake
  kHelloAck = 5,  // server -> client: handshake answer
  // 6 and 7 were a shared-memory pairing, removed; never sent.
  kClose = 8,  // either side: this side closes the connection; the
               // header says why. Endpoints made from a worker address
               // tell the peer nothing when closed while the process
               // lives (it would learn from UCX's keepalive, 20 s+).
};

struct Frame {
  FrameKind kind = FrameKind::kRequest;
  uint8_t flags = 0;
  uint16_t op = 0;
  uint32_t header_len = 0;
  uint64_t request_id = 0;
  uint64_t payload_len = 0;

  bool header_in_data() const { return (flags & kFrameHeaderInData) != 0; }
};

// A request id's top 24 bits name the flow it belongs to: the caller of a
// connection that several callers share (Transport::ConnectShared; 0 for
// a connection of one). The listener's admission is fair among the flows
// of a connection as among connections.
inline constexpr int kFlowShift = 40;
inline constexpr uint32_t kMaxFlow = (1u << 24) - 1;
inline uint32_t FlowOf(uint64_t request_id) {
  return static_cast<uint32_t>(request_id >> kFlowShift) & kMaxFlow;
}
inline uint64_t RequestId(uint32_t flow, uint64_t seq) {
  return (uint64_t{flow & kMaxFlow} << kFlowShift) |
         (seq & ((uint64_t{1} << kFlowShift) - 1));
}

// The listener's id for flow `flow` of endpoint `ep_id` (Message::peer,
// the admission's client): unique while endpoint ids stay below 2^40.
inline uint64_t AdmissionClient(uint64_t ep_id, uint32_t flow) {
  return (ep_id << 24) | (flow & kMaxFlow);
}
inline uint64_t EndpointOf(uint64_t admission_client) {
  return admission_client >> 24;
}

// Writes `frame` into out[0, kFrameBytes).
void EncodeFrame(const Frame& frame, char* out);

// Parses and validates the frame at the start of an AM header of
// `am_header_len` bytes whose AM data is `data_len` bytes long. Checks the
// magic, the kind, the flags, both length limits and that the lengths add up
// to what arrived. DATA_LOSS naming the first violation otherwise.
Result<Frame> ParseFrame(const void* am_header, size_t am_header_len,
                         size_t data_len);

// The header of a kHello: who is calling, so that the listener
// can make an endpoint of its own back to it (UCX destroys the endpoints it
// made for a peer by itself, without a word, when that peer fails; only an
// endpoint the listener created is safe to keep).
//   u32 address length | the sender worker's address | rest
// little-endian; `rest` is the client's name (for log lines).
struct Hello {
  std::string worker_address;
  std::string rest;
};
std::string EncodeHello(const Hello& hello);
// DATA_LOSS naming what is wrong unless `header` is one Hello whose address
// is 1 to 16 KiB long.
Result<Hello> DecodeHello(std::string_view header);

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_FRAME_H_
