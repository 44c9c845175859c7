#include "server/manifest_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "format/crc32c.h"

namespace stagger::server {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

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

// Writes all of `bytes` to `fd` and fdatasyncs it.
Status WriteSynced(int fd, const std::string& bytes, const std::string& path) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("write", path);
    off += static_cast<size_t>(n);
  }
  if (fdatasync(fd) != 0) return Errno("fdatasync", path);
  return absl::OkStatus();
}

Status SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("open", dir);
  Status s = fsync(fd) == 0 ? absl::OkStatus() : Errno("fsync", dir);
  close(fd);
  return s;
}

Status EnsureDir(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return absl::OkStatus();
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("create ", dir, ": ", ec.message()));
  }
  const std::string parent = std::filesystem::path(dir).parent_path();
  return SyncDir(parent.empty() ? "." : parent);
}

}  // namespace

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
  STAGGER_RETURN_IF_ERROR(EnsureDir(dir_));
  Status first;
  bool created = false;
  for (const auto& [path, bytes] : by_path) {
    // stat, not std::filesystem::exists: that one throws on an I/O error.
    struct stat st;
    created = created || ::stat(path.c_str(), &st) != 0;
    int fd =
        open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      first.Update(Errno("open", path));
      continue;
    }
    first.Update(WriteSynced(fd, bytes, path));
    close(fd);
  }
  if (first.ok() && created) first = SyncDir(dir_);
  return first;
}

Status ManifestLog::Rewrite(const std::string& job,
                            const std::vector<pb::ShardManifest>& manifests) {
  const std::string path = PathOf(job);
  const std::string tmp = path + ".tmp";
  std::string bytes;
  for (const pb::ShardManifest& m : manifests) bytes += Entry(m);
  absl::MutexLock l(&mu_);
  STAGGER_RETURN_IF_ERROR(EnsureDir(dir_));
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open", tmp);
  Status s = WriteSynced(fd, bytes, tmp);
  close(fd);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    s = Errno("rename to", path);
  }
  if (s.ok()) s = SyncDir(dir_);
  return s;
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
