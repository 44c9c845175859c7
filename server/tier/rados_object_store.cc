#include "server/tier/rados_object_store.h"

#include <rados/librados.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace stagger::server::tier {
namespace {

// The key of the context that lists every namespace.
const char kAllNamespaces[] = "\x01all";

Status ConfigError(int rc, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("ceph configuration: ", AsAbsl(what), ": ", strerror(-rc)));
}

// Sets `key` to `value` unless the configuration changed it from Ceph's
// default `ceph_default` (values set here override the file's).
void DefaultTo(rados_t h, const char* key, double ceph_default,
               const char* value) {
  char buf[64] = {0};
  if (rados_conf_get(h, key, buf, sizeof buf - 1) == 0 &&
      std::strtod(buf, nullptr) == ceph_default) {
    rados_conf_set(h, key, value);
  }
}

// A cluster handle from the configuration file and $CEPH_ARGS, with calls
// bounded where they leave Ceph's defaults (no timeout for operations, 300
// s to connect): monitor 10 s, OSD operations 30 s, connecting 10 s.
Status NewHandle(const RadosOptions& o, rados_t* out) {
  rados_t h = nullptr;
  int rc = rados_create2(&h, "ceph", o.client.c_str(), 0);
  if (rc < 0) return ConfigError(rc, "rados_create2");
  rc = rados_conf_read_file(
      h, o.conf_file.empty() ? nullptr : o.conf_file.c_str());
  if (rc < 0 && !o.conf_file.empty()) {
    rados_shutdown(h);
    return ConfigError(rc, absl::StrCat("cannot read ", o.conf_file));
  }
  rados_conf_parse_env(h, nullptr);
  DefaultTo(h, "client_mount_timeout", 300, "10");
  DefaultTo(h, "rados_mon_op_timeout", 0, "10");
  DefaultTo(h, "rados_osd_op_timeout", 0, "30");
  *out = h;
  return absl::OkStatus();
}

}  // namespace

struct RadosObjectStore::Session {
  rados_t handle = nullptr;
  absl::Mutex mu;
  std::map<std::string, rados_ioctx_t> contexts ABSL_GUARDED_BY(mu);
  ~Session() {
    {
      absl::MutexLock lock(&mu);
      for (auto& [ns, io] : contexts) rados_ioctx_destroy(io);
    }
    if (handle != nullptr) rados_shutdown(handle);
  }
};

RadosObjectStore::RadosObjectStore(RadosOptions options)
    : options_(std::move(options)) {}

RadosObjectStore::~RadosObjectStore() = default;

Result<std::unique_ptr<RadosObjectStore>> RadosObjectStore::Open(
    RadosOptions options) {
  if (options.pool.empty()) {
    return absl::InvalidArgumentError("--rados-pool: empty pool name");
  }
  // The configuration is checked now; the cluster is reached at first use.
  rados_t probe = nullptr;
  STAGGER_RETURN_IF_ERROR(NewHandle(options, &probe));
  rados_shutdown(probe);
  return std::unique_ptr<RadosObjectStore>(
      new RadosObjectStore(std::move(options)));
}

std::string RadosObjectStore::Describe() const {
  return absl::StrCat("rados pool ", options_.pool);
}

Result<std::shared_ptr<RadosObjectStore::Session>>
RadosObjectStore::Connected() {
  absl::MutexLock lock(&mu_);
  if (session_) return session_;
  auto s = std::make_shared<Session>();
  STAGGER_RETURN_IF_ERROR(NewHandle(options_, &s->handle));
  const int rc = rados_connect(s->handle);
  if (rc < 0) {
    return absl::UnavailableError(absl::StrCat(
        Describe(), ": cannot connect to the Ceph cluster: ", strerror(-rc)));
  }
  session_ = s;
  return s;
}

void RadosObjectStore::Drop(const std::shared_ptr<Session>& s) {
  absl::MutexLock lock(&mu_);
  if (session_ == s) session_.reset();
}

Result<void*> RadosObjectStore::Context(Session& s, const std::string& ns) {
  absl::MutexLock lock(&s.mu);
  auto it = s.contexts.find(ns);
  if (it != s.contexts.end()) return static_cast<void*>(it->second);
  rados_ioctx_t io = nullptr;
  const int rc = rados_ioctx_create(s.handle, options_.pool.c_str(), &io);
  if (rc == -ENOENT) {
    return absl::NotFoundError(
        absl::StrCat(Describe(),
                     ": the pool does not exist (create it: "
                     "ceph osd pool create ",
                     options_.pool, ")"));
  }
  if (rc < 0) {
    return absl::UnavailableError(
        absl::StrCat(Describe(), ": cannot open the pool: ", strerror(-rc)));
  }
  rados_ioctx_set_namespace(
      io, ns == kAllNamespaces ? LIBRADOS_ALL_NSPACES : ns.c_str());
  s.contexts[ns] = io;
  return static_cast<void*>(io);
}

Status RadosObjectStore::Error(int rc, std::string_view op, const ObjectName& o,
                               const std::shared_ptr<Session>& s) {
  std::string msg =
      absl::StrCat(Describe(), ": ", AsAbsl(op), " of object ", o.name,
                   " (namespace ", o.ns, "): ", strerror(-rc));
  switch (-rc) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    case EIO:
      return absl::DataLossError(msg);
    case EINVAL:
    case E2BIG:
    case EFBIG:
      return absl::InvalidArgumentError(msg);
    default:
      Drop(s);  // timed out or cut off: connect afresh next time
      return absl::UnavailableError(msg);
  }
}

// The session and I/O context a call on namespace `ns` runs with.
Result<RadosObjectStore::Call> RadosObjectStore::Begin(const std::string& ns) {
  STAGGER_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Connected());
  STAGGER_ASSIGN_OR_RETURN(void* io, Context(*session, ns));
  return Call{std::move(session), io};
}

Status RadosObjectStore::Put(const ObjectName& o, std::string_view bytes) {
  STAGGER_ASSIGN_OR_RETURN(Call c, Begin(o.ns));
  rados_ioctx_t io = static_cast<rados_ioctx_t>(c.io);
  const int rc =
      rados_write_full(io, o.name.c_str(), bytes.data(), bytes.size());
  return rc < 0 ? Error(rc, "write", o, c.session) : absl::OkStatus();
}

Result<bool> RadosObjectStore::PutNew(const ObjectName& o,
                                      std::string_view bytes) {
  STAGGER_ASSIGN_OR_RETURN(Call c, Begin(o.ns));
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, nullptr);
  rados_write_op_write_full(op, bytes.data(), bytes.size());
  const int rc = rados_write_op_operate(op, static_cast<rados_ioctx_t>(c.io),
                                        o.name.c_str(), nullptr, 0);
  rados_release_write_op(op);
  if (rc == -EEXIST) return false;
  if (rc < 0) return Error(rc, "write", o, c.session);
  return true;
}

Result<std::optional<ObjectInfo>> RadosObjectStore::Stat(const ObjectName& o) {
  STAGGER_ASSIGN_OR_RETURN(Call c, Begin(o.ns));
  uint64_t size = 0;
  time_t mtime = 0;
  const int rc = rados_stat(static_cast<rados_ioctx_t>(c.io), o.name.c_str(),
                            &size, &mtime);
  if (rc == -ENOENT) return std::optional<ObjectInfo>();
  if (rc < 0) return Error(rc, "stat", o, c.session);
  return std::optional<ObjectInfo>(
      ObjectInfo{size, static_cast<int64_t>(mtime)});
}

Result<std::string> RadosObjectStore::Get(const ObjectName& o) {
  STAGGER_ASSIGN_OR_RETURN(std::optional<uint64_t> size, Size(o));
  if (!size) return Error(-ENOENT, "read", o, nullptr);
  STAGGER_ASSIGN_OR_RETURN(transport::Buffer bytes,
                           Read(o, transport::Buffer(*size)));
  return std::string(bytes.view());
}

Result<transport::Buffer> RadosObjectStore::Read(const ObjectName& o,
                                                 transport::Buffer out) {
  STAGGER_ASSIGN_OR_RETURN(Call c, Begin(o.ns));
  rados_ioctx_t io = static_cast<rados_ioctx_t>(c.io);
  size_t got = 0;
  while (got < out.size()) {
    const int rc =
        rados_read(io, o.name.c_str(), out.data() + got, out.size() - got, got);
    if (rc < 0) return Error(rc, "read", o, c.session);
    if (rc == 0) break;  // shrank meanwhile
    got += static_cast<size_t>(rc);
  }
  out.resize(got);
  return out;
}

Status RadosObjectStore::Remove(const ObjectName& o) {
  STAGGER_ASSIGN_OR_RETURN(Call c, Begin(o.ns));
  rados_ioctx_t io = static_cast<rados_ioctx_t>(c.io);
  const int rc = rados_remove(io, o.name.c_str());
  return rc < 0 && rc != -ENOENT ? Error(rc, "remove", o, c.session)
                                 : absl::OkStatus();
}

Result<std::vector<std::string>> RadosObjectStore::List(
    const std::string& ns, const std::string& prefix) {
  STAGGER_ASSIGN_OR_RETURN(Call c, Begin(ns));
  rados_ioctx_t io = static_cast<rados_ioctx_t>(c.io);
  rados_list_ctx_t list = nullptr;
  int rc = rados_nobjects_list_open(io, &list);
  if (rc < 0) return Error(rc, "list", {ns, prefix + "*"}, c.session);
  std::vector<std::string> out;
  const char* entry = nullptr;
  while ((rc = rados_nobjects_list_next(list, &entry, nullptr, nullptr)) == 0) {
    if (absl::StartsWith(entry, prefix)) out.emplace_back(entry);
  }
  rados_nobjects_list_close(list);
  if (rc != -ENOENT) return Error(rc, "list", {ns, prefix + "*"}, c.session);
  return out;
}

Result<std::vector<std::string>> RadosObjectStore::Namespaces() {
  STAGGER_ASSIGN_OR_RETURN(Call c, Begin(kAllNamespaces));
  rados_ioctx_t io = static_cast<rados_ioctx_t>(c.io);
  rados_list_ctx_t list = nullptr;
  int rc = rados_nobjects_list_open(io, &list);
  if (rc < 0) return Error(rc, "list", {"*", "*"}, c.session);
  std::set<std::string> names;
  const char *entry = nullptr, *nspace = nullptr;
  while ((rc = rados_nobjects_list_next(list, &entry, nullptr, &nspace)) == 0) {
    if (nspace != nullptr && nspace[0] != '\0') names.insert(nspace);
  }
  rados_nobjects_list_close(list);
  if (rc != -ENOENT) return Error(rc, "list", {"*", "*"}, c.session);
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace stagger::server::tier
