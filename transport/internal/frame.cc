#include "transport/internal/frame.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/transport.h"

namespace stagger::transport_internal {
namespace {

template <typename T>
void Put(char* out, size_t offset, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out[offset + i] =
        static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff);
  }
}

template <typename T>
T Get(const unsigned char* in, size_t offset) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<uint64_t>(in[offset + i]) << (8 * i);
  }
  return static_cast<T>(v);
}

Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed transport frame: ", what));
}

}  // namespace

void EncodeFrame(const Frame& frame, char* out) {
  Put<uint32_t>(out, 0, kFrameMagic);
  Put<uint8_t>(out, 4, static_cast<uint8_t>(frame.kind));
  Put<uint8_t>(out, 5, frame.flags);
  Put<uint16_t>(out, 6, frame.op);
  Put<uint32_t>(out, 8, frame.header_len);
  Put<uint64_t>(out, 12, frame.request_id);
  Put<uint64_t>(out, 20, frame.payload_len);
}

Result<Frame> ParseFrame(const void* am_header, size_t am_header_len,
                         size_t data_len) {
  if (am_header == nullptr || am_header_len < kFrameBytes) {
    return Malformed(absl::StrCat("AM header of ", am_header_len,
                                  " bytes is shorter than a frame"));
  }
  const auto* in = static_cast<const unsigned char*>(am_header);
  if (Get<uint32_t>(in, 0) != kFrameMagic) return Malformed("bad magic");
  Frame f;
  uint8_t kind = Get<uint8_t>(in, 4);
  if (kind < static_cast<uint8_t>(FrameKind::kRequest) ||
      kind > static_cast<uint8_t>(FrameKind::kClose) ||
      (kind > static_cast<uint8_t>(FrameKind::kHelloAck) &&
       kind < static_cast<uint8_t>(FrameKind::kClose))) {
    return Malformed(absl::StrCat("unknown kind ", kind));
  }
  f.kind = static_cast<FrameKind>(kind);
  f.flags = Get<uint8_t>(in, 5);
  if ((f.flags & ~kFrameHeaderInData) != 0) {
    return Malformed(absl::StrCat("unknown flags ", f.flags));
  }
  f.op = Get<uint16_t>(in, 6);
  f.header_len = Get<uint32_t>(in, 8);
  f.request_id = Get<uint64_t>(in, 12);
  f.payload_len = Get<uint64_t>(in, 20);
  if (f.header_len > transport::kMaxHeaderBytes) {
    return Malformed(absl::StrCat("header_len ", f.header_len, " exceeds ",
                                  transport::kMaxHeaderBytes));
  }
  if (f.payload_len > transport::kMaxPayloadBytes) {
    return Malformed(absl::StrCat("payload_len ", f.payload_len, " exceeds ",
                                  transport::kMaxPayloadBytes));
  }
  // Both lengths are bounded above, so these sums cannot overflow.
  const size_t want_am = kFrameBytes + (f.header_in_data() ? 0 : f.header_len);
  const size_t want_data =
      f.payload_len + (f.header_in_data() ? f.header_len : 0);
  if (am_header_len != want_am) {
    return Malformed(absl::StrCat("AM header is ", am_header_len,
                                  " bytes, frame says ", want_am));
  }
  if (data_len != want_data) {
    return Malformed(absl::StrCat("AM data is ", data_len,
                                  " bytes, frame says ", want_data));
  }
  return f;
}

std::string EncodeHello(const Hello& hello) {
  std::string out(4, '\0');
  Put(out.data(), 0, static_cast<uint32_t>(hello.worker_address.size()));
  out += hello.worker_address;
  out += hello.rest;
  return out;
}

Result<Hello> DecodeHello(std::string_view header) {
  if (header.size() < 4) {
    return absl::DataLossError(
        absl::StrCat("hello of ", header.size(), " bytes: no address length"));
  }
  const uint32_t n =
      Get<uint32_t>(reinterpret_cast<const unsigned char*>(header.data()), 0);
  if (n == 0 || n > (16u << 10) || n > header.size() - 4) {
    return absl::DataLossError(
        absl::StrCat("hello announces a worker address of ", n, " bytes in ",
                     header.size() - 4, " (1 to 16384 expected)"));
  }
  Hello out;
  out.worker_address = std::string(header.substr(4, n));
  out.rest = std::string(header.substr(4 + n));
  return out;
}

}  // namespace stagger::transport_internal
