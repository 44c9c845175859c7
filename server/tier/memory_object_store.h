// MemoryObjectStore: an ObjectStore in a map, for tests. It can be made
// unreachable (every call UNAVAILABLE, as a stopped Ceph cluster) and its
// objects can be damaged in place.
//
// Thread-safety: thread-safe.
#ifndef STAGGER_SERVER_TIER_MEMORY_OBJECT_STORE_H_
#define STAGGER_SERVER_TIER_MEMORY_OBJECT_STORE_H_

#include <atomic>
#include <cstring>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/tier/object_store.h"

namespace stagger::server::tier {

class MemoryObjectStore final : public ObjectStore {
 public:
  Status Put(const ObjectName& o, std::string_view bytes) override;
  Result<bool> PutNew(const ObjectName& o, std::string_view bytes) override;
  Result<std::string> Get(const ObjectName& o) override;
  Result<transport::Buffer> Read(const ObjectName& o,
                                 transport::Buffer into) override {
    STAGGER_ASSIGN_OR_RETURN(std::string bytes, Get(o));
    if (bytes.size() > into.size()) bytes.resize(into.size());
    if (!bytes.empty()) memcpy(into.data(), bytes.data(), bytes.size());
    into.resize(bytes.size());
    return into;
  }
  Result<std::optional<ObjectInfo>> Stat(const ObjectName& o) override;
  // Makes the object look written at `unix_s` (tests of grace periods).
  bool SetWrittenAt(const ObjectName& o, int64_t unix_s);
  Status Remove(const ObjectName& o) override;
  Result<std::vector<std::string>> List(const std::string& ns,
                                        const std::string& prefix) override;
  Result<std::vector<std::string>> Namespaces() override;
  std::string Describe() const override { return "memory object store"; }

  // While true, every call fails with UNAVAILABLE.
  void SetReachable(bool reachable) { reachable_ = reachable; }
  // Flips one bit of byte `at` of the object; false when it is absent or
  // shorter.
  bool Corrupt(const ObjectName& o, size_t at);
  // Calls of Put so far (that reached the store).
  uint64_t puts() const;
  uint64_t bytes_put() const;
  // Calls of Get (and Read) so far that reached the store.
  uint64_t gets() const;

 private:
  Status Check() const;

  std::atomic<bool> reachable_{true};
  mutable absl::Mutex mu_;
  struct Object {
    std::string bytes;
    int64_t written_unix_s = 0;
  };
  std::map<std::pair<std::string, std::string>, Object> objects_
      ABSL_GUARDED_BY(mu_);
  uint64_t puts_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t gets_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_put_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_MEMORY_OBJECT_STORE_H_
