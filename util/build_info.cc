#include "util/build_info.h"

#include <google/protobuf/stubs/common.h>
#include <grpcpp/version_info.h>
#include <rocksdb/version.h>
#include <ucp/api/ucp_version.h>
#include <zstd.h>

#include "absl/strings/str_cat.h"

#ifndef STAGGER_VERSION
#define STAGGER_VERSION "unknown"
#endif
#ifndef STAGGER_URING_VERSION
#define STAGGER_URING_VERSION "unknown"
#endif
#ifndef STAGGER_UCX_VERSION
#define STAGGER_UCX_VERSION "unknown"
#endif

namespace stagger {

// The record format's version (format/record.h's kFormatVersion; util
// sits below format/, so it is repeated here and checked by a test).
inline constexpr int kBuildFormatVersion = 1;

std::string Version() { return STAGGER_VERSION; }
int FormatVersion() { return kBuildFormatVersion; }

std::string BuildInfo(const std::string& program) {
  const int pb = GOOGLE_PROTOBUF_VERSION;
  return absl::StrCat(
      program, " ", STAGGER_VERSION, " (format ", kBuildFormatVersion,
      ")\nbuilt with UCX ", STAGGER_UCX_VERSION, " (API ", UCP_API_MAJOR, ".",
      UCP_API_MINOR, "), liburing ", STAGGER_URING_VERSION, ", RocksDB ",
      ROCKSDB_MAJOR, ".", ROCKSDB_MINOR, ".", ROCKSDB_PATCH, ", gRPC ",
      GRPC_CPP_VERSION_STRING, ", protobuf ", pb / 1000000, ".",
      pb / 1000 % 1000, ".", pb % 1000, ", zstd ", ZSTD_VERSION_STRING);
}

}  // namespace stagger
