// Helpers shared by the fd-based File implementations (POSIX and io_uring):
// an owning fd wrapper and the blocking pread/pwrite loops used both by
// PosixFile and by UringFile on threads that could not get a ring.
#ifndef STAGGER_SERVER_STORAGE_INTERNAL_FD_FILE_H_
#define STAGGER_SERVER_STORAGE_INTERNAL_FD_FILE_H_

#include <string>

#include "server/storage/file_system.h"
#include "stagger/status.h"

namespace stagger::storage_internal {

// A File that owns an fd; closes it on destruction. Subclasses supply the
// I/O calls.
class FdFile : public server::File {
 public:
  FdFile(int fd, std::string path, bool direct)
      : fd_(fd), path_(std::move(path)), direct_(direct) {}
  ~FdFile() override;
  FdFile(const FdFile&) = delete;
  FdFile& operator=(const FdFile&) = delete;

  Result<uint64_t> Size() override;
  Result<bool> Allocate(uint64_t offset, uint64_t len) override;
  bool direct_io() const override { return direct_; }
  const std::string& path() const override { return path_; }

 protected:
  int fd() const { return fd_; }

 private:
  int fd_;
  std::string path_;
  bool direct_;
};

// Blocking loops: continue short transfers, retry EINTR.
Status PwriteAll(int fd, const std::string& path,
                 const server::WriteRequest& w);
Status PreadAll(int fd, const std::string& path, server::ReadRequest& r);
Status Fdatasync(int fd, const std::string& path);

// open(2) with the flags `options` asks for. When O_DIRECT is refused with
// EINVAL the file is reopened buffered and *direct is set false.
Result<int> OpenFd(const std::string& path, const server::FileOptions& options,
                   bool* direct);

}  // namespace stagger::storage_internal

#endif  // STAGGER_SERVER_STORAGE_INTERNAL_FD_FILE_H_
