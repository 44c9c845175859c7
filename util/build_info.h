// What this build is: the project's version, the on-disk format version and
// the versions of the libraries it was compiled against (for --version).
#ifndef STAGGER_UTIL_BUILD_INFO_H_
#define STAGGER_UTIL_BUILD_INFO_H_

#include <string>

namespace stagger {

// "PROGRAM VERSION (format N)\nbuilt with UCX ..., liburing ..., RocksDB
// ..., gRPC ..., protobuf ..., zstd ..." (no final newline).
std::string BuildInfo(const std::string& program);
// The project's version ("0.1.0") and the on-disk format's.
std::string Version();
int FormatVersion();

}  // namespace stagger

#endif  // STAGGER_UTIL_BUILD_INFO_H_
