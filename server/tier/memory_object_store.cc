#include "server/tier/memory_object_store.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace stagger::server::tier {

Status MemoryObjectStore::Check() const {
  if (reachable_) return absl::OkStatus();
  return absl::UnavailableError("memory object store: unreachable (test)");
}

Status MemoryObjectStore::Put(const ObjectName& o, std::string_view bytes) {
  STAGGER_RETURN_IF_ERROR(Check());
  absl::MutexLock lock(&mu_);
  objects_[{o.ns, o.name}] =
      Object{std::string(bytes), absl::ToUnixSeconds(absl::Now())};
  ++puts_;
  bytes_put_ += bytes.size();
  return absl::OkStatus();
}

Result<bool> MemoryObjectStore::PutNew(const ObjectName& o,
                                       std::string_view bytes) {
  STAGGER_RETURN_IF_ERROR(Check());
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = objects_.try_emplace(
      {o.ns, o.name},
      Object{std::string(bytes), absl::ToUnixSeconds(absl::Now())});
  if (inserted) {
    ++puts_;
    bytes_put_ += bytes.size();
  }
  return inserted;
}

Result<std::string> MemoryObjectStore::Get(const ObjectName& o) {
  STAGGER_RETURN_IF_ERROR(Check());
  absl::MutexLock lock(&mu_);
  ++gets_;
  auto it = objects_.find({o.ns, o.name});
  if (it == objects_.end()) {
    return absl::NotFoundError(
        absl::StrCat("object ", o.name, " of ", o.ns, ": not found"));
  }
  return it->second.bytes;
}

Result<std::optional<ObjectInfo>> MemoryObjectStore::Stat(const ObjectName& o) {
  STAGGER_RETURN_IF_ERROR(Check());
  absl::MutexLock lock(&mu_);
  auto it = objects_.find({o.ns, o.name});
  if (it == objects_.end()) return std::optional<ObjectInfo>();
  return std::optional<ObjectInfo>(
      ObjectInfo{it->second.bytes.size(), it->second.written_unix_s});
}

bool MemoryObjectStore::SetWrittenAt(const ObjectName& o, int64_t unix_s) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find({o.ns, o.name});
  if (it == objects_.end()) return false;
  it->second.written_unix_s = unix_s;
  return true;
}

Status MemoryObjectStore::Remove(const ObjectName& o) {
  STAGGER_RETURN_IF_ERROR(Check());
  absl::MutexLock lock(&mu_);
  objects_.erase({o.ns, o.name});
  return absl::OkStatus();
}

Result<std::vector<std::string>> MemoryObjectStore::List(
    const std::string& ns, const std::string& prefix) {
  STAGGER_RETURN_IF_ERROR(Check());
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (auto it = objects_.lower_bound({ns, prefix});
       it != objects_.end() && it->first.first == ns &&
       absl::StartsWith(it->first.second, prefix);
       ++it) {
    out.push_back(it->first.second);
  }
  return out;
}

Result<std::vector<std::string>> MemoryObjectStore::Namespaces() {
  STAGGER_RETURN_IF_ERROR(Check());
  absl::MutexLock lock(&mu_);
  std::set<std::string> names;
  for (const auto& [key, bytes] : objects_) names.insert(key.first);
  return std::vector<std::string>(names.begin(), names.end());
}

bool MemoryObjectStore::Corrupt(const ObjectName& o, size_t at) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find({o.ns, o.name});
  if (it == objects_.end() || it->second.bytes.size() <= at) return false;
  it->second.bytes[at] ^= 1;
  return true;
}

uint64_t MemoryObjectStore::gets() const {
  absl::MutexLock lock(&mu_);
  return gets_;
}

uint64_t MemoryObjectStore::puts() const {
  absl::MutexLock lock(&mu_);
  return puts_;
}

uint64_t MemoryObjectStore::bytes_put() const {
  absl::MutexLock lock(&mu_);
  return bytes_put_;
}

}  // namespace stagger::server::tier
