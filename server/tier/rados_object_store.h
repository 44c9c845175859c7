// RadosObjectStore: an ObjectStore over a Ceph RADOS pool (librados' C API),
// one RADOS namespace per job.
//
// Open does not need the cluster: it connects at the first call, and again
// after a failed connect, so a server starts (and keeps saving to its
// disk) while Ceph is down, and its drain catches up once Ceph is back.
// Calls are bounded: the monitor and OSD operation timeouts (10 s and
// 30 s where the configuration leaves Ceph's default, none) turn a cluster
// that stopped answering into UNAVAILABLE instead of a hang.
//
// Thread-safety: thread-safe; librados' I/O contexts are shared, one per
// namespace and session, each created once and never changed.
#ifndef STAGGER_SERVER_TIER_RADOS_OBJECT_STORE_H_
#define STAGGER_SERVER_TIER_RADOS_OBJECT_STORE_H_

#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/tier/object_store.h"

namespace stagger::server::tier {

struct RadosOptions {
  std::string pool;
  // Ceph configuration file; empty: librados' defaults
  // (/etc/ceph/ceph.conf, $CEPH_CONF).
  std::string conf_file;
  // The client's name, "client.<id>" (its keyring comes from the
  // configuration).
  std::string client = "client.admin";
};

class RadosObjectStore final : public ObjectStore {
 public:
  // INVALID_ARGUMENT for an empty pool name or a configuration file that
  // cannot be read; does not connect.
  static Result<std::unique_ptr<RadosObjectStore>> Open(RadosOptions options);
  ~RadosObjectStore() override;

  Status Put(const ObjectName& o, std::string_view bytes) override;
  Result<bool> PutNew(const ObjectName& o, std::string_view bytes) override;
  Result<std::string> Get(const ObjectName& o) override;
  Result<transport::Buffer> Read(const ObjectName& o,
                                 transport::Buffer into) override;
  Result<std::optional<ObjectInfo>> Stat(const ObjectName& o) override;
  Status Remove(const ObjectName& o) override;
  Result<std::vector<std::string>> List(const std::string& ns,
                                        const std::string& prefix) override;
  Result<std::vector<std::string>> Namespaces() override;
  std::string Describe() const override;

 private:
  // One connected cluster handle and its I/O contexts. Calls hold a
  // reference while they run; a call that times out drops the session, so
  // the next call connects afresh (librados' own reconnection did not
  // recover from a restart of the whole cluster here).
  struct Session;
  explicit RadosObjectStore(RadosOptions options);
  // The current session, connecting first when there is none.
  Result<std::shared_ptr<Session>> Connected();
  struct Call {
    std::shared_ptr<Session> session;
    void* io;  // rados_ioctx_t
  };
  // The session and I/O context for a call on namespace `ns`.
  Result<Call> Begin(const std::string& ns);
  // The I/O context of namespace `ns` (kAllNamespaces: all of them).
  Result<void*> Context(Session& s, const std::string& ns);
  // Forgets `s` if it is still the current session.
  void Drop(const std::shared_ptr<Session>& s);
  // An error of a librados call, naming the operation and the object;
  // drops the session when the cluster did not answer.
  Status Error(int rc, std::string_view op, const ObjectName& o,
               const std::shared_ptr<Session>& s);

  const RadosOptions options_;
  absl::Mutex mu_;  // held while connecting
  std::shared_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_RADOS_OBJECT_STORE_H_
