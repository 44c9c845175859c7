// MetaStore's RocksDB keys and value helpers, shared by its .cc files.
//
// Keys: a kind letter, '/', the job, '\0', then what the kind needs:
//   c  chunk index entry   + 16-byte chunk id
//   b  chunk marked bad    + 16-byte chunk id
//   s  step info           + step (big-endian 64)
//   r  step drained        + step
//   m  shard manifest      + step + rank (big-endian 32)
//   p  memory-level shard  + step + rank (pb::MemoryShard, promoter.h)
#ifndef STAGGER_SERVER_INTERNAL_META_KEYS_H_
#define STAGGER_SERVER_INTERNAL_META_KEYS_H_

#include <rocksdb/status.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "format/chunk_id.h"
#include "stagger/status.h"

namespace stagger::server::meta_internal {

inline Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("metadata ", AsAbsl(what), ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError()) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

inline void PutBE64(std::string* out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>(v >> (8 * i)));
}

inline std::string JobPrefix(char kind, const std::string& job) {
  std::string k(1, kind);
  k += '/';
  k += job;
  k += '\0';
  return k;
}
inline std::string ChunkKey(const std::string& job, const format::ChunkId& id) {
  return JobPrefix('c', job) + id.ToBytes();
}
inline std::string BadKey(const std::string& job, const format::ChunkId& id) {
  return JobPrefix('b', job) + id.ToBytes();
}
inline std::string StepKey(const std::string& job, int64_t step) {
  std::string k = JobPrefix('s', job);
  PutBE64(&k, static_cast<uint64_t>(step));
  return k;
}
// The value of a drained-step key for a step imported from the cold store.
constexpr char kColdOnly[] = "cold-only";

inline std::string DrainedKey(const std::string& job, int64_t step) {
  std::string k = JobPrefix('r', job);
  PutBE64(&k, static_cast<uint64_t>(step));
  return k;
}
inline std::string ShardKey(const std::string& job, int64_t step,
                            uint32_t rank) {
  std::string k = JobPrefix('m', job);
  PutBE64(&k, static_cast<uint64_t>(step));
  for (int i = 3; i >= 0; --i) k.push_back(static_cast<char>(rank >> (8 * i)));
  return k;
}
// The memory-level shard records of one step (every rank's) share this.
inline std::string MemoryShardPrefix(const std::string& job, int64_t step) {
  std::string k = JobPrefix('p', job);
  PutBE64(&k, static_cast<uint64_t>(step));
  return k;
}
inline std::string MemoryShardKey(const std::string& job, int64_t step,
                                  uint32_t rank) {
  std::string k = MemoryShardPrefix(job, step);
  for (int i = 3; i >= 0; --i) k.push_back(static_cast<char>(rank >> (8 * i)));
  return k;
}

template <typename Msg>
Result<Msg> ParseValue(const std::string& v, std::string_view what) {
  Msg m;
  if (!m.ParseFromString(v)) {
    return absl::DataLossError(
        absl::StrCat("corrupt metadata record: ", AsAbsl(what)));
  }
  return m;
}

}  // namespace stagger::server::meta_internal

#endif  // STAGGER_SERVER_INTERNAL_META_KEYS_H_
