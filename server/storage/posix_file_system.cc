#include "server/storage/posix_file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "server/storage/internal/fd_file.h"

namespace stagger::server {
namespace {

using storage_internal::FdFile;

class PosixFile final : public FdFile {
 public:
  using FdFile::FdFile;

  Status WriteAt(absl::Span<const WriteRequest> writes,
                 const IOOptions&) override {
    for (const WriteRequest& w : writes) {
      STAGGER_RETURN_IF_ERROR(storage_internal::PwriteAll(fd(), path(), w));
    }
    return absl::OkStatus();
  }

  Status ReadAt(absl::Span<ReadRequest> reads, const IOOptions&) override {
    for (ReadRequest& r : reads) {
      STAGGER_RETURN_IF_ERROR(storage_internal::PreadAll(fd(), path(), r));
    }
    return absl::OkStatus();
  }

  Status Sync(const IOOptions&) override {
    return storage_internal::Fdatasync(fd(), path());
  }
};

}  // namespace

Result<std::unique_ptr<File>> PosixFileSystem::Open(
    const std::string& path, const FileOptions& options) {
  bool direct = false;
  STAGGER_ASSIGN_OR_RETURN(int fd,
                           storage_internal::OpenFd(path, options, &direct));
  return std::unique_ptr<File>(std::make_unique<PosixFile>(fd, path, direct));
}

Status PosixFileSystem::CreateDirs(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("CreateDirs: empty path");
  // Walk every prefix ending before a '/', then the whole path.
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), 0755) == 0 || errno == EEXIST) continue;
    return IoError("mkdir", prefix, errno);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return IoError("stat", path, errno);
  if (!S_ISDIR(st.st_mode)) return IoError("mkdir", path, ENOTDIR);
  return absl::OkStatus();
}

Result<std::vector<std::string>> PosixFileSystem::ListDir(
    const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return IoError("opendir", path, errno);
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
    errno = 0;
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return IoError("readdir", path, err);
  return names;
}

Status PosixFileSystem::Remove(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return absl::OkStatus();
  if (errno == EISDIR || errno == EPERM) {
    if (::rmdir(path.c_str()) == 0) return absl::OkStatus();
  }
  return IoError("remove", path, errno);
}

Status PosixFileSystem::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
  return IoError("rename to " + to, from, errno);
}

Result<bool> PosixFileSystem::Exists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  return IoError("stat", path, errno);
}

Result<bool> PosixFileSystem::IsDirectory(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return IoError("stat", path, errno);
  return S_ISDIR(st.st_mode);
}

Status PosixFileSystem::Truncate(const std::string& path, uint64_t size) {
  if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
    return IoError("truncate", path, errno);
  }
  return absl::OkStatus();
}

Status PosixFileSystem::SyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("open", path, errno);
  Status s = storage_internal::Fdatasync(fd, path);
  ::close(fd);
  return s;
}

}  // namespace stagger::server
