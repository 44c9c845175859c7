// DecodedChunks: the decoded bytes of chunks recently read for GetRange
// (data_service_range.cc). A reshard's slice boundaries fall inside saved
// chunks, so two ranks each ask for a part of the same chunk at about the
// same time; with this cache the server reads, decodes and checks it once.
//
//   auto bytes = cache.Get(job, id, raw_length, [&](char* out) {
//     return DecodeStoredChunk(..., out, ...);  // checked against `id`
//   });
//   reply->Send(op, header, DecodedChunks::Slice(*bytes, offset, length));
//
// A chunk stays until as many of its bytes were served as it holds (the
// ranks of a reshard ask for disjoint parts: then every part was served),
// or until it is the least recently used one past the byte bound: ranks
// drift apart, and the other part of a chunk may be asked for hundreds of
// megabytes later. A chunk being decoded is decoded once: other callers
// for it wait for that decode (and get its error, if any; errors are not
// cached). Chunks are content-addressed, so a cached chunk is never stale:
// what was checked against its id stays right.
//
// Thread-safety: thread-safe.
#ifndef STAGGER_SERVER_DECODED_CHUNKS_H_
#define STAGGER_SERVER_DECODED_CHUNKS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "format/chunk_id.h"
#include "stagger/status.h"
#include "transport/buffer.h"
#include "transport/buffer_pool.h"

namespace stagger::server {

class DecodedChunks {
 public:
  using Bytes = std::shared_ptr<const transport::Buffer>;

  // Keeps at most `max_bytes` of decoded chunks (0: none kept; concurrent
  // callers still share a decode).
  explicit DecodedChunks(size_t max_bytes);

  // The decoded bytes of chunk `id` of `job` (`raw_length` of them), of
  // which the caller serves `serving`: the cached ones, or those `decode`
  // returns (exactly raw_length bytes; NewBuffer() is the place to decode
  // into), run once for all callers that ask meanwhile. `decode`'s error is
  // returned to each of them and nothing is kept.
  Result<Bytes> Get(const std::string& job, const format::ChunkId& id,
                    size_t raw_length, size_t serving,
                    const std::function<Result<transport::Buffer>()>& decode);

  // `size` bytes to decode into, recycled once they leave the cache.
  transport::Buffer NewBuffer(size_t size) { return pool_->Get(size); }

  // A buffer of `length` bytes at `offset` of `bytes` that keeps them alive
  // without copying them (the transport only reads a payload it sends).
  static transport::Buffer Slice(const Bytes& bytes, size_t offset,
                                 size_t length);

  struct Stats {
    uint64_t hits = 0;     // served from the cache or a decode in flight
    uint64_t decodes = 0;  // decodes run
    size_t bytes = 0;      // held now
  };
  Stats stats() const;

 private:
  struct Entry {
    bool ready = false;
    size_t served = 0;  // bytes asked for so far
    bool kept = false;  // in lru_ and counted in bytes_
    Status status;
    Bytes bytes;
    std::list<std::string>::iterator lru;  // when ready and kept
  };
  void Evict() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `serving` bytes of the entry served; drops it once all were.
  void Served(const std::string& key, const std::shared_ptr<Entry>& e,
              size_t serving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_bytes_;
  // Decode buffers, recycled as entries leave (they are chunk-sized).
  std::shared_ptr<transport::BufferPool> pool_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_DECODED_CHUNKS_H_
