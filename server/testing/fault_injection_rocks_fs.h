// FaultInjectionRocksFs: RocksDB's files under the same power-loss model
// as FaultInjectionFileSystem (server/storage/fault_injection_file_system.h)
// gives the segments and manifest logs, for tests that crash a whole data
// directory (after RocksDB's utilities/fault_injection_fs.h, which Debian's
// package does not ship):
//
//  - while `active` (a predicate, usually the segment file system's
//    active()) says false, the process "died": appends, syncs, file
//    creations, renames and deletions fail;
//  - DropUnsyncedData: every file written through the wrapper keeps only
//    what its last Sync/Fsync covered, files created since their
//    directory's last fsync vanish, and renames their target's directory
//    was not fsynced after are undone.
//
// A deletion is taken as durable at once (RocksDB finds an obsolete file
// that came back and deletes it again).
//
// Thread-safety: thread-safe. Hand it to RocksDB with
// rocksdb::NewCompositeEnv(std::shared_ptr<FileSystem>).
#ifndef STAGGER_SERVER_TESTING_FAULT_INJECTION_ROCKS_FS_H_
#define STAGGER_SERVER_TESTING_FAULT_INJECTION_ROCKS_FS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/file_system.h"
#include "stagger/status.h"

namespace stagger::server_internal {

class FaultInjectionRocksFs : public rocksdb::FileSystemWrapper {
 public:
  // `active` is asked before every mutating call.
  explicit FaultInjectionRocksFs(std::function<bool()> active);

  const char* Name() const override { return "StaggerFaultInjectionRocksFs"; }

  // Simulated power loss; call with the database closed.
  Status DropUnsyncedData();
  // Bytes the power losses so far cut off files or removed with them.
  uint64_t dropped_bytes() const;

  rocksdb::IOStatus NewWritableFile(const std::string& fname,
                                    const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& fname, const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& fname, const std::string& old_fname,
      const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name,
                                 const rocksdb::IOOptions& io,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src,
                               const std::string& target,
                               const rocksdb::IOOptions& io,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname,
                               const rocksdb::IOOptions& io,
                               rocksdb::IODebugContext* dbg) override;

 private:
  class File;
  class Directory;
  struct FileState {
    uint64_t written = 0;
    uint64_t synced = 0;
    bool entry_durable = true;
  };
  struct PendingRename {
    std::string from, to;
    bool from_durable = true;
    bool had_old = false;
    std::string old_bytes;  // `to`'s durable bytes before the rename
  };

  rocksdb::IOStatus Inactive(const std::string& what) const;
  bool Active() const { return active_(); }
  rocksdb::IOStatus Track(const std::string& fname, bool existed,
                          std::unique_ptr<rocksdb::FSWritableFile>* r);
  void Appended(const std::string& fname, uint64_t end);
  void Synced(const std::string& fname);
  void DirSynced(const std::string& dir);

  const std::function<bool()> active_;
  mutable absl::Mutex mu_;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, FileState> files_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingRename> renames_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::server_internal

#endif  // STAGGER_SERVER_TESTING_FAULT_INJECTION_ROCKS_FS_H_
