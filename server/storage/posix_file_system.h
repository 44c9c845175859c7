// PosixFileSystem: pwrite/pread/fdatasync, one call at a time. The fallback
// when the kernel refuses io_uring, and the base of UringFileSystem, which
// shares its directory operations.
//
// Thread-safety: thread-safe; holds no state.
#ifndef STAGGER_SERVER_STORAGE_POSIX_FILE_SYSTEM_H_
#define STAGGER_SERVER_STORAGE_POSIX_FILE_SYSTEM_H_

#include <memory>
#include <string>
#include <vector>

#include "server/storage/file_system.h"

namespace stagger::server {

class PosixFileSystem : public FileSystem {
 public:
  PosixFileSystem() = default;

  Result<std::unique_ptr<File>> Open(const std::string& path,
                                     const FileOptions& options) override;
  Status CreateDirs(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Status Remove(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Result<bool> Exists(const std::string& path) override;
  Result<bool> IsDirectory(const std::string& path) override;
  Status Truncate(const std::string& path, uint64_t size) override;
  Status SyncDir(const std::string& path) override;
  std::string Name() const override { return "posix"; }
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_STORAGE_POSIX_FILE_SYSTEM_H_
