// ObjectStore: the durable tier behind servers' disks (docs/design.md §10), as
// the drain and the reads that fall back to it see it: named objects in
// namespaces (one per job), written whole, read whole or by range.
//
// RadosObjectStore (rados_object_store.h, a Ceph RADOS pool) and
// S3ObjectStore (s3_object_store.h, an S3 bucket) are the production ones;
// MemoryObjectStore (memory_object_store.h) serves unit tests and can be
// made to fail. The server takes one through ServerOptions::cold_store, so
// its library never links librados or libcurl.
//
// Errors: UNAVAILABLE when the store cannot be reached or timed out (the
// caller retries later); NOT_FOUND for an absent object; DATA_LOSS when
// the store says its copy is damaged.
//
// Thread-safety: implementations are thread-safe.
#ifndef STAGGER_SERVER_TIER_OBJECT_STORE_H_
#define STAGGER_SERVER_TIER_OBJECT_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stagger/status.h"
#include "transport/buffer.h"

namespace stagger::server::tier {

struct ObjectName {
  std::string ns;    // namespace: the job
  std::string name;  // within it
};

struct ObjectInfo {
  uint64_t size = 0;
  int64_t written_unix_s = 0;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // Writes `bytes` as the whole object, replacing what was there; durable
  // when it returns OK.
  virtual Status Put(const ObjectName& o, std::string_view bytes) = 0;
  // Writes `bytes` as a new object, atomically: false (and nothing
  // written) when the object exists already. One round trip either way.
  virtual Result<bool> PutNew(const ObjectName& o, std::string_view bytes) = 0;
  // The whole object; NOT_FOUND when absent.
  virtual Result<std::string> Get(const ObjectName& o) = 0;
  // The first into.size() bytes of the object (all of it when that is its
  // size, from Size): one read, no stat, into `into` (a chunk's payload is
  // sent from it uncopied; the caller's buffer may come from a pool), which
  // is returned. NOT_FOUND when absent; fewer bytes when the object is
  // shorter.
  virtual Result<transport::Buffer> Read(const ObjectName& o,
                                         transport::Buffer into) = 0;
  // The object's size and when it was last written; nullopt when absent.
  virtual Result<std::optional<ObjectInfo>> Stat(const ObjectName& o) = 0;
  // Its size alone (Stat).
  Result<std::optional<uint64_t>> Size(const ObjectName& o) {
    STAGGER_ASSIGN_OR_RETURN(std::optional<ObjectInfo> info, Stat(o));
    if (!info) return std::optional<uint64_t>();
    return std::optional<uint64_t>(info->size);
  }
  // OK when absent too.
  virtual Status Remove(const ObjectName& o) = 0;
  // The objects of namespace `ns` whose names start with `prefix`, in no
  // particular order.
  virtual Result<std::vector<std::string>> List(const std::string& ns,
                                                const std::string& prefix) = 0;
  // The namespaces that hold objects.
  virtual Result<std::vector<std::string>> Namespaces() = 0;
  // For messages: "rados pool P", "memory".
  virtual std::string Describe() const = 0;
};

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_OBJECT_STORE_H_
