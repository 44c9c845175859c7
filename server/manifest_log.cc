#include "server/manifest_log.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "format/crc32c.h"

namespace stagger::server {
namespace {

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  }
  return v;
}

std::string Entry(const pb::ShardManifest& m) {
  std::string payload = m.SerializeAsString();
  std::string out;
  PutU32(&out, static_cast<uint32_t>(payload.size()));
  PutU32(&out, format::Crc32c(payload.data(), payload.size()));
  out += payload;
  return out;
}

}  // namespace

Status ManifestLog::EnsureDir() {
  STAGGER_ASSIGN_OR_RETURN(bool exists, fs_->Exists(dir_));
  if (exists) return absl::OkStatus();
  STAGGER_RETURN_IF_ERROR(fs_->CreateDirs(dir_));
  const std::string parent = std::filesystem::path(dir_).parent_path();
  return fs_->SyncDir(parent.empty() ? "." : parent);
}

Status ManifestLog::AppendSynced(const std::string& path,
                                 const std::string& bytes, bool* created) {
  auto end = ends_.find(path);
  if (end == ends_.end()) {
    STAGGER_ASSIGN_OR_RETURN(bool exists, fs_->Exists(path));
    *created = *created || !exists;
  }
  FileOptions o;
  o.create = o.writable = true;
  STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<File> f, fs_->Open(path, o));
  STAGGER_ASSIGN_OR_RETURN(const uint64_t size, f->Size());
  if (end == ends_.end()) {
    // First append to this log in this process: after its last intact
    // entry, cutting off the torn tail a crash may have left (an entry
    // written behind it could never be read back).
    STAGGER_ASSIGN_OR_RETURN(Contents c, Read(path));
    end = ends_.emplace(path, size - std::min(size, c.ignored_bytes)).first;
  }
  // Also what an append that failed here part way left.
  if (size != end->second) {
    STAGGER_RETURN_IF_ERROR(fs_->Truncate(path, end->second));
  }
  WriteRequest w{end->second, bytes.data(), bytes.size()};
  STAGGER_RETURN_IF_ERROR(f->WriteAt(absl::MakeConstSpan(&w, 1)));
  STAGGER_RETURN_IF_ERROR(f->Sync());
  end->second += bytes.size();
  return absl::OkStatus();
}

Status ManifestLog::Append(const pb::ShardManifest& m) {
  return AppendAll({&m});
}

Status ManifestLog::AppendAll(
    const std::vector<const pb::ShardManifest*>& manifests) {
  if (manifests.empty()) return absl::OkStatus();
  std::map<std::string, std::string> by_path;
  for (const pb::ShardManifest* m : manifests) {
    by_path[PathOf(m->job())] += Entry(*m);
  }
  absl::MutexLock l(&mu_);
  STAGGER_RETURN_IF_ERROR(EnsureDir());
  Status first;
  bool created = false;
  for (const auto& [path, bytes] : by_path) {
    first.Update(AppendSynced(path, bytes, &created));
  }
  if (first.ok() && created) first = fs_->SyncDir(dir_);
  return first;
}

Status ManifestLog::Rewrite(const std::string& job,
                            const std::vector<pb::ShardManifest>& manifests) {
  const std::string path = PathOf(job);
  const std::string tmp = path + ".tmp";
  std::string bytes;
  for (const pb::ShardManifest& m : manifests) bytes += Entry(m);
  absl::MutexLock l(&mu_);
  STAGGER_RETURN_IF_ERROR(EnsureDir());
  // What an earlier rewrite that failed may have left.
  STAGGER_ASSIGN_OR_RETURN(bool stale, fs_->Exists(tmp));
  if (stale) STAGGER_RETURN_IF_ERROR(fs_->Remove(tmp));
  {
    FileOptions o;
    o.create = o.writable = true;
    STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<File> f, fs_->Open(tmp, o));
    WriteRequest w{0, bytes.data(), bytes.size()};
    STAGGER_RETURN_IF_ERROR(f->WriteAt(absl::MakeConstSpan(&w, 1)));
    STAGGER_RETURN_IF_ERROR(f->Sync());
  }
  // Until the rename, appends go to the old log; after it, after `bytes`.
  ends_.erase(path);
  STAGGER_RETURN_IF_ERROR(fs_->Rename(tmp, path));
  STAGGER_RETURN_IF_ERROR(fs_->SyncDir(dir_));
  ends_[path] = bytes.size();
  return absl::OkStatus();
}

Result<ManifestLog::Contents> ManifestLog::Read(const std::string& path) {
  Contents c;
  std::ifstream f(path, std::ios::binary);
  if (!f) return c;
  std::string bytes((std::istreambuf_iterator<char>(f)),
                    std::istreambuf_iterator<char>());
  size_t off = 0;
  while (off + 8 <= bytes.size()) {
    const uint32_t len = GetU32(bytes.data() + off);
    const uint32_t crc = GetU32(bytes.data() + off + 4);
    if (len > bytes.size() - off - 8) break;
    const char* payload = bytes.data() + off + 8;
    pb::ShardManifest m;
    if (format::Crc32c(payload, len) != crc ||
        !m.ParseFromArray(payload, len)) {
      break;
    }
    c.manifests.push_back(std::move(m));
    off += 8 + len;
  }
  c.ignored_bytes = bytes.size() - off;
  return c;
}

}  // namespace stagger::server
