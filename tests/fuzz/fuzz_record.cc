// Fuzz target: the chunk record decoder (format/record.h) and the codecs
// behind it (format/codec.h), as a server reading a segment or a client
// reading a GetChunk reply meets them. Input: a whole record (header,
// payload, padding). Nothing may crash, hang or allocate what a header
// merely claims.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/codec.h"
#include "format/record.h"

// Decoding allocates raw_length bytes; a real reader has the length from
// its own index. Headers claiming more are skipped here (the decoders
// themselves never allocate from the claim).
constexpr uint64_t kMaxDecode = 8 << 20;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stagger::format;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto header = DecodeRecordHeader(in.substr(0, kRecordHeaderSize));
  auto verified = VerifyRecord(in);
  if (!header.ok() || !verified.ok()) return 0;
  if (verified->raw_length > kMaxDecode) return 0;
  const std::string_view payload =
      in.substr(kRecordHeaderSize, verified->encoded_length);
  std::string out(verified->raw_length, '\0');
  if (IsDelta(verified->codec)) {
    if (DeltaBase(payload).ok()) {
      const std::string base(verified->raw_length, '\x5a');
      (void)DecodeDelta(verified->codec, payload, base, out.data(), out.size());
    }
  } else {
    (void)Decode(verified->codec, payload, out.data(), out.size());
  }
  (void)ChunkId::Of(out.data(), out.size());
  return 0;
}
