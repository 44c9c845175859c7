#include "server/tier/rados_object_store.h"

#include <rados/librados.h>

#include <cerrno>
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

// A cluster handle: bounded calls by default (monitor 10 s, OSD operations
// 30 s), then the configuration file and $CEPH_ARGS, which may say
// otherwise.
Status NewHandle(const RadosOptions& o, rados_t* out) {
  rados_t h = nullptr;
  int rc = rados_create2(&h, "ceph", o.client.c_str(), 0);
  if (rc < 0) return ConfigError(rc, "rados_create2");
  rados_conf_set(h, "client_mount_timeout", "10");
  rados_conf_set(h, "rados_mon_op_timeout", "10");
  rados_conf_set(h, "rados_osd_op_timeout", "30");
  rc = rados_conf_read_file(
      h, o.conf_file.empty() ? nullptr : o.conf_file.c_str());
  if (rc < 0 && !o.conf_file.empty()) {
    rados_shutdown(h);
    return ConfigError(rc, absl::StrCat("cannot read ", o.conf_file));
  }
  rados_conf_parse_env(h, nullptr);
  *out = h;
  return absl::OkStatus();
}

}  // namespace

struct RadosObjectStore::Cluster {
  rados_t handle = nullptr;
  bool connected = false;
  ~Cluster() {
    if (handle != nullptr) rados_shutdown(handle);
  }
};

RadosObjectStore::RadosObjectStore(RadosOptions options)
    : options_(std::move(options)) {}

RadosObjectStore::~RadosObjectStore() {
  absl::MutexLock lock(&mu_);
  for (auto& [ns, io] : contexts_) {
    rados_ioctx_destroy(static_cast<rados_ioctx_t>(io));
  }
  contexts_.clear();
  cluster_.reset();
}

Result<std::unique_ptr<RadosObjectStore>> RadosObjectStore::Open(
    RadosOptions options) {
  if (options.pool.empty()) {
    return absl::InvalidArgumentError("--rados-pool: empty pool name");
  }
  std::unique_ptr<RadosObjectStore> store(
      new RadosObjectStore(std::move(options)));
  absl::MutexLock lock(&store->mu_);
  auto cluster = std::make_unique<Cluster>();
  STAGGER_RETURN_IF_ERROR(NewHandle(store->options_, &cluster->handle));
  store->cluster_ = std::move(cluster);
  return store;
}

std::string RadosObjectStore::Describe() const {
  return absl::StrCat("rados pool ", options_.pool);
}

Status RadosObjectStore::Connect() {
  if (cluster_->connected) return absl::OkStatus();
  const int rc = rados_connect(cluster_->handle);
  if (rc < 0) {
    // A handle whose connect failed cannot connect again: start afresh.
    auto fresh = std::make_unique<Cluster>();
    if (NewHandle(options_, &fresh->handle).ok()) cluster_ = std::move(fresh);
    return absl::UnavailableError(absl::StrCat(
        Describe(), ": cannot connect to the Ceph cluster: ", strerror(-rc)));
  }
  cluster_->connected = true;
  return absl::OkStatus();
}

Result<void*> RadosObjectStore::Context(const std::string& ns) {
  absl::MutexLock lock(&mu_);
  auto it = contexts_.find(ns);
  if (it != contexts_.end()) return it->second;
  STAGGER_RETURN_IF_ERROR(Connect());
  rados_ioctx_t io = nullptr;
  const int rc =
      rados_ioctx_create(cluster_->handle, options_.pool.c_str(), &io);
  if (rc == -ENOENT) {
    return absl::NotFoundError(
        absl::StrCat(Describe(), ": the pool does not exist"));
  }
  if (rc < 0) {
    return absl::UnavailableError(
        absl::StrCat(Describe(), ": cannot open the pool: ", strerror(-rc)));
  }
  rados_ioctx_set_namespace(
      io, ns == kAllNamespaces ? LIBRADOS_ALL_NSPACES : ns.c_str());
  contexts_[ns] = io;
  return static_cast<void*>(io);
}

Status RadosObjectStore::Error(int rc, std::string_view op,
                               const ObjectName& o) const {
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
      return absl::UnavailableError(msg);
  }
}

Status RadosObjectStore::Put(const ObjectName& o, std::string_view bytes) {
  STAGGER_ASSIGN_OR_RETURN(void* io, Context(o.ns));
  const int rc = rados_write_full(static_cast<rados_ioctx_t>(io),
                                  o.name.c_str(), bytes.data(), bytes.size());
  return rc < 0 ? Error(rc, "write", o) : absl::OkStatus();
}

Result<std::optional<uint64_t>> RadosObjectStore::Size(const ObjectName& o) {
  STAGGER_ASSIGN_OR_RETURN(void* io, Context(o.ns));
  uint64_t size = 0;
  time_t mtime = 0;
  const int rc =
      rados_stat(static_cast<rados_ioctx_t>(io), o.name.c_str(), &size, &mtime);
  if (rc == -ENOENT) return std::optional<uint64_t>();
  if (rc < 0) return Error(rc, "stat", o);
  return std::optional<uint64_t>(size);
}

Result<std::string> RadosObjectStore::Get(const ObjectName& o) {
  STAGGER_ASSIGN_OR_RETURN(std::optional<uint64_t> size, Size(o));
  if (!size) return Error(-ENOENT, "read", o);
  STAGGER_ASSIGN_OR_RETURN(void* io, Context(o.ns));
  std::string out(*size, '\0');
  size_t got = 0;
  while (got < out.size()) {
    const int rc = rados_read(static_cast<rados_ioctx_t>(io), o.name.c_str(),
                              out.data() + got, out.size() - got, got);
    if (rc < 0) return Error(rc, "read", o);
    if (rc == 0) break;  // shrank meanwhile
    got += static_cast<size_t>(rc);
  }
  out.resize(got);
  return out;
}

Status RadosObjectStore::Remove(const ObjectName& o) {
  STAGGER_ASSIGN_OR_RETURN(void* io, Context(o.ns));
  const int rc = rados_remove(static_cast<rados_ioctx_t>(io), o.name.c_str());
  return rc < 0 && rc != -ENOENT ? Error(rc, "remove", o) : absl::OkStatus();
}

Result<std::vector<std::string>> RadosObjectStore::List(
    const std::string& ns, const std::string& prefix) {
  STAGGER_ASSIGN_OR_RETURN(void* io, Context(ns));
  rados_list_ctx_t list = nullptr;
  int rc = rados_nobjects_list_open(static_cast<rados_ioctx_t>(io), &list);
  if (rc < 0) return Error(rc, "list", {ns, prefix + "*"});
  std::vector<std::string> out;
  const char* entry = nullptr;
  while ((rc = rados_nobjects_list_next(list, &entry, nullptr, nullptr)) == 0) {
    if (absl::StartsWith(entry, prefix)) out.emplace_back(entry);
  }
  rados_nobjects_list_close(list);
  if (rc != -ENOENT) return Error(rc, "list", {ns, prefix + "*"});
  return out;
}

Result<std::vector<std::string>> RadosObjectStore::Namespaces() {
  STAGGER_ASSIGN_OR_RETURN(void* io, Context(kAllNamespaces));
  rados_list_ctx_t list = nullptr;
  int rc = rados_nobjects_list_open(static_cast<rados_ioctx_t>(io), &list);
  if (rc < 0) return Error(rc, "list", {"*", "*"});
  std::set<std::string> names;
  const char *entry = nullptr, *nspace = nullptr;
  while ((rc = rados_nobjects_list_next(list, &entry, nullptr, &nspace)) == 0) {
    if (nspace != nullptr && nspace[0] != '\0') names.insert(nspace);
  }
  rados_nobjects_list_close(list);
  if (rc != -ENOENT) return Error(rc, "list", {"*", "*"});
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace stagger::server::tier
