#include "server/storage/internal/fd_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace stagger::storage_internal {

FdFile::~FdFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<uint64_t> FdFile::Size() {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return server::IoError("fstat", path_, errno);
  return static_cast<uint64_t>(st.st_size);
}

Result<bool> FdFile::Allocate(uint64_t offset, uint64_t len) {
  while (::fallocate(fd_, 0, static_cast<off_t>(offset),
                     static_cast<off_t>(len)) != 0) {
    if (errno == EINTR) continue;
    if (errno == EOPNOTSUPP) return false;  // this filesystem cannot
    return server::IoError("fallocate", path_, errno);
  }
  return true;
}

Status PwriteAll(int fd, const std::string& path,
                 const server::WriteRequest& w) {
  size_t done = 0;
  while (done < w.len) {
    ssize_t n = ::pwrite(fd, w.data + done, w.len - done,
                         static_cast<off_t>(w.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return server::IoError("pwrite", path, errno);
    }
    // A zero-byte write of a non-empty range would loop forever.
    if (n == 0) return server::IoError("pwrite (no progress)", path, EIO);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

Status PreadAll(int fd, const std::string& path, server::ReadRequest& r) {
  r.bytes_read = 0;
  while (r.bytes_read < r.len) {
    ssize_t n = ::pread(fd, r.data + r.bytes_read, r.len - r.bytes_read,
                        static_cast<off_t>(r.offset + r.bytes_read));
    if (n < 0) {
      if (errno == EINTR) continue;
      return server::IoError("pread", path, errno);
    }
    if (n == 0) break;  // end of file
    r.bytes_read += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

Status Fdatasync(int fd, const std::string& path) {
  while (::fdatasync(fd) != 0) {
    if (errno != EINTR) return server::IoError("fdatasync", path, errno);
  }
  return absl::OkStatus();
}

Result<int> OpenFd(const std::string& path, const server::FileOptions& options,
                   bool* direct) {
  int flags = O_CLOEXEC | (options.writable ? O_RDWR : O_RDONLY);
  if (options.create) flags |= O_CREAT;
  if (options.create && options.exclusive) flags |= O_EXCL;
  *direct = options.direct;
  int fd = ::open(path.c_str(), flags | (options.direct ? O_DIRECT : 0), 0644);
  if (fd < 0 && errno == EINVAL && options.direct) {
    *direct = false;
    fd = ::open(path.c_str(), flags, 0644);
  }
  if (fd < 0) return server::IoError("open", path, errno);
  return fd;
}

}  // namespace stagger::storage_internal
