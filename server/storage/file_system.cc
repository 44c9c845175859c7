#include "server/storage/file_system.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/storage/posix_file_system.h"
#include "server/storage/uring_file_system.h"
#include "util/log.h"

namespace stagger::server {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

Status IoError(const std::string& op, const std::string& path, int err) {
  std::string msg = absl::StrCat(op, " ", path, ": ", std::strerror(err),
                                 " (errno ", err, ")");
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

Result<std::unique_ptr<FileSystem>> NewDefaultFileSystem(unsigned queue_depth) {
  if (queue_depth == 0) {
    return absl::InvalidArgumentError("file system queue depth must be > 0");
  }
  UringFileSystemOptions options;
  options.queue_depth = queue_depth;
  auto uring = UringFileSystem::Create(options);
  if (uring.ok()) return std::unique_ptr<FileSystem>(std::move(*uring));
  // Logged here, once per store, because this is where the choice is made.
  log::Warning("stagger storage",
               absl::StrCat("io_uring unavailable (", uring.status().message(),
                            "); using POSIX I/O"));
  return std::unique_ptr<FileSystem>(std::make_unique<PosixFileSystem>());
}

}  // namespace stagger::server
