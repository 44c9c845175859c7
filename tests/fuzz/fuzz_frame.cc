// Fuzz target: the transport's active-message frame parser
// (transport/internal/frame.h), the first thing that reads bytes from the
// network. Input: 8 bytes of claimed AM data length (little-endian), then
// the AM header.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/internal/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t data_len = 0;
  std::memcpy(&data_len, data, 8);
  auto frame =
      stagger::transport_internal::ParseFrame(data + 8, size - 8, data_len);
  if (frame.ok()) {
    // A frame that parsed round-trips.
    char out[stagger::transport_internal::kFrameBytes];
    stagger::transport_internal::EncodeFrame(*frame, out);
    if (std::memcmp(out, data + 8, sizeof out) != 0) __builtin_trap();
  }
  return 0;
}
