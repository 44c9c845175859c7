// ManifestLog: every shard manifest this server holds, also kept beside
// the segments in <data>/manifests/<job>.log, so that
// `stagger-server --rebuild-index` can restore the metadata (RocksDB) from
// the data directory without it.
//
// An entry is u32 length | u32 crc32c of the payload | the serialized
// ShardManifest (little endian). A commit appends its manifest, fdatasynced,
// after RocksDB took it; a crash between the two leaves that one commit
// out of a rebuild (its step is then incomplete there: the previous step
// stays latest). After a gc the job's log is rewritten from the manifests
// still held (temporary file, fsync, rename, directory fsync), so it holds
// no step the gc deleted. Reading stops at the first entry that is torn or
// fails its checksum (the tail a crash during an append leaves).
//
// Thread-safety: thread-safe.
#ifndef STAGGER_SERVER_MANIFEST_LOG_H_
#define STAGGER_SERVER_MANIFEST_LOG_H_

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "format/manifest.pb.h"
#include "stagger/status.h"

namespace stagger::server {

class ManifestLog {
 public:
  // Logs live in `dir` (created on first use).
  explicit ManifestLog(std::string dir) : dir_(std::move(dir)) {}

  Status Append(const pb::ShardManifest& m);
  // Appends each of `manifests` to its job's log, each log written and
  // synced once (a group of commits).
  Status AppendAll(const std::vector<const pb::ShardManifest*>& manifests);
  // Replaces `job`'s log with exactly `manifests`.
  Status Rewrite(const std::string& job,
                 const std::vector<pb::ShardManifest>& manifests);

  struct Contents {
    std::vector<pb::ShardManifest> manifests;
    uint64_t ignored_bytes = 0;  // a torn or corrupt tail
  };
  // A job's log; empty when it has none.
  static Result<Contents> Read(const std::string& path);

  std::string PathOf(const std::string& job) const {
    return dir_ + "/" + job + ".log";
  }

 private:
  const std::string dir_;
  absl::Mutex mu_;  // one writer at a time, across jobs
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_MANIFEST_LOG_H_
