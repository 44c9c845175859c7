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
// fails its checksum (the tail a crash during an append leaves); the first
// append to a log in a process cuts such a tail off, and an append that
// failed part way is overwritten by the next, so that no entry is ever
// written behind unreadable bytes. Every file operation goes through the
// data directory's FileSystem (server/storage/file_system.h).
//
// Thread-safety: thread-safe.
#ifndef STAGGER_SERVER_MANIFEST_LOG_H_
#define STAGGER_SERVER_MANIFEST_LOG_H_

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "format/manifest.pb.h"
#include "server/storage/file_system.h"
#include "stagger/status.h"

namespace stagger::server {

class ManifestLog {
 public:
  // Logs live in `dir` (created on first use), written through `fs` (not
  // owned).
  ManifestLog(std::string dir, FileSystem* fs)
      : dir_(std::move(dir)), fs_(fs) {}

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
  Status EnsureDir() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends `bytes` to the log at `path` and syncs it; sets *created when
  // the file did not exist.
  Status AppendSynced(const std::string& path, const std::string& bytes,
                      bool* created) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  FileSystem* const fs_;
  absl::Mutex mu_;  // one writer at a time, across jobs
  // Where each log's intact entries end, once appended to here.
  std::map<std::string, uint64_t> ends_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_MANIFEST_LOG_H_
