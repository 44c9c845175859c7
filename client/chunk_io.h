// Chunk I/O over the data plane: encode and put chunks, fetch and decode
// them, with a bounded number in flight. CPU work (hashing, compression,
// decompression, verification) runs on an executor, never on the
// transport's progress thread.
//
// Every fetched chunk is verified end to end: the record checksum, the
// decoded length, and the xxh3 fingerprint of the decoded bytes against the
// chunk id. A mismatch is DATA_LOSS naming the chunk and the server.
//
// Thread-safety: ChunkIo is thread-safe; each call blocks its caller.
#ifndef STAGGER_CLIENT_CHUNK_IO_H_
#define STAGGER_CLIENT_CHUNK_IO_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/server_set.h"
#include "format/codec.h"
#include "format/manifest.pb.h"
#include "qos/executor.h"

namespace stagger::client {

struct PutSpan {
  const char* data = nullptr;  // raw bytes, valid until PutChunks returns
  size_t len = 0;
  pb::ChunkRef* ref = nullptr;  // filled on success
};

struct PutStats {
  std::atomic<uint64_t> bytes_raw{0};
  std::atomic<uint64_t> bytes_shipped{0};
  std::atomic<uint64_t> chunks{0};
};

struct FetchItem {
  const pb::ChunkRef* ref = nullptr;
  char* dest = nullptr;  // raw_length bytes; nullptr = verify only
};

class ChunkIo {
 public:
  // None owned.
  ChunkIo(ServerSet* servers, qos::Executor* executor, std::string job,
          format::Codec codec, format::EncodeOptions encode,
          size_t max_inflight);

  // Encodes and stores every span; returns when all are durable or the
  // first failed (its status, with the chunk id and server).
  Status PutChunks(const std::vector<PutSpan>& spans, PutStats* stats);

  // Fetches, verifies and decodes every item. `on_result` (optional) is
  // called once per item with its outcome, from executor threads. Returns the
  // first error (all items are attempted when `on_result` is given;
  // otherwise the first error stops issuing new fetches).
  Status Fetch(const std::vector<FetchItem>& items,
               const std::function<void(size_t, const Status&)>& on_result);

 private:
  ServerSet* servers_;
  qos::Executor* executor_;
  std::string job_;
  format::Codec codec_;
  format::EncodeOptions encode_;
  size_t max_inflight_;
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CHUNK_IO_H_
