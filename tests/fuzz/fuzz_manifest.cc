// Fuzz target: what the server parses from a client before trusting it:
// a rank's manifest (CommitShard; parse, then ValidateShardManifest) and
// the data-plane request headers (PutChunk, GetChunk, GetRange) and reply
// headers.
// The first byte picks the parser; the rest is the message.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "format/data_plane.h"
#include "format/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stagger::format;
  // Invalid UTF-8 in a string field is an expected parse failure; keep
  // protobuf from logging each one.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      stagger::pb::ShardManifest m;
      if (m.ParseFromArray(in.data(), static_cast<int>(in.size()))) {
        (void)ValidateShardManifest(m);
      }
      break;
    }
    case 1:
      (void)DecodePutChunk(in);
      break;
    case 2:
      (void)DecodeGetChunk(in);
      break;
    case 4:
      (void)DecodeGetRange(in);
      break;
    case 5:
      (void)DecodeRangeReply(in);
      break;
    default:
      (void)DecodeReply(in);
      break;
  }
  return 0;
}
