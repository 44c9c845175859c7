// FaultInjectionFileSystem: wraps another FileSystem and injects the
// failures a storage writer must survive, after LevelDB's
// db/fault_injection_test.cc and RocksDB's utilities/fault_injection_fs.h:
//
//  - FailNthWrite: one write request fails (nothing of it is written);
//  - SetNoSpaceAfter: the disk "fills up" after N more bytes (ENOSPC ->
//    RESOURCE_EXHAUSTED; the crossing write is written up to the limit;
//    File::Allocate of more than what is left fails);
//  - FailNextSyncs: fdatasync fails;
//  - CrashAfterWrites / SetActive(false): the process "dies": later writes,
//    syncs, creations and removals fail with UNAVAILABLE;
//  - DropUnsyncedData: the power-loss model. Every file written through the
//    wrapper loses what was written after its last successful Sync (all of
//    it, or a random prefix survives as a torn tail), files created
//    since their directory's last SyncDir disappear, and a Rename not
//    followed by a SyncDir of the target's directory is undone (the
//    target holds what it held before, durably, or is gone).
//  - SetRejectDirectIO: opening with O_DIRECT behaves as on a filesystem
//    that refuses it (the file is opened buffered, direct_io() false).
//
// Only files opened writable through this wrapper are tracked. Reads and
// directory listings pass through.
//
// Thread-safety: thread-safe. The base FileSystem must outlive the wrapper,
// and the wrapper must outlive its files.
#ifndef STAGGER_SERVER_STORAGE_FAULT_INJECTION_FILE_SYSTEM_H_
#define STAGGER_SERVER_STORAGE_FAULT_INJECTION_FILE_SYSTEM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/storage/file_system.h"

namespace stagger::server {

class FaultInjectionFileSystem : public FileSystem {
 public:
  enum class CrashMode {
    kDropAll,   // files end at their last synced size
    kTornTail,  // a random part of the unsynced bytes survives
  };

  // `base` is not owned.
  explicit FaultInjectionFileSystem(FileSystem* base);
  ~FaultInjectionFileSystem() override;

  // The n-th write request from now (1-based) fails once with `status`.
  void FailNthWrite(uint64_t n, Status status = absl::InternalError(
                                    "injected write failure"));
  // After `bytes` more bytes are written, writes fail with ENOSPC.
  void SetNoSpaceAfter(uint64_t bytes);
  void ClearNoSpace();
  // The next `count` Sync calls fail with `status`.
  void FailNextSyncs(
      int count, Status status = absl::InternalError("injected sync failure"));
  // Once `n` more write requests have succeeded the filesystem goes
  // inactive, as if the process had died right after them.
  void CrashAfterWrites(uint64_t n);
  // Inactive: writes, syncs, opens for writing, mkdir, remove and truncate
  // fail with UNAVAILABLE.
  void SetActive(bool active);
  bool active() const;
  void SetRejectDirectIO(bool reject);

  // Simulated power loss; call with no tracked file open. Leaves the wrapper
  // active and its fault settings cleared. Errors from the base (truncate,
  // remove) are returned.
  Status DropUnsyncedData(CrashMode mode = CrashMode::kDropAll,
                          uint32_t seed = 0);

  uint64_t write_requests() const;  // successful write requests so far
  uint64_t syncs() const;           // successful syncs so far

  // FileSystem.
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
  Status RegisterBuffers(absl::Span<const iovec> buffers) override;
  void UnregisterBuffers() override;
  std::string Name() const override;
  uint64_t RequestsInFlight() const override {
    return base_->RequestsInFlight();
  }

 private:
  class FaultFile;
  struct FileState {
    uint64_t synced_size = 0;   // durable length
    uint64_t written_end = 0;   // end of the furthest completed write
    bool entry_durable = true;  // false until SyncDir of its directory
  };
  // A rename not yet made durable by a SyncDir of `to`'s directory.
  struct PendingRename {
    std::string from, to;
    bool from_durable = true;  // `from`'s own entry was durable
    bool had_old = false;      // `to` existed; its durable bytes:
    std::string old_bytes;
  };

  // Puts back what the renames since the last SyncDir changed.
  Status UndoRenames() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Decides the fate of one write request. Returns the number of bytes to
  // pass to the base (≤ len) and sets *error when the request fails.
  size_t Admit(const std::string& path, size_t len, bool direct, Status* error);
  // Decides whether a reservation (File::Allocate) of `len` bytes may
  // proceed: UNAVAILABLE when inactive, RESOURCE_EXHAUSTED past the space
  // left.
  Status AdmitAllocate(const std::string& path, uint64_t len);
  void Written(const std::string& path, uint64_t end);
  uint64_t WrittenEnd(const std::string& path);
  Status BeforeSync();
  void Synced(const std::string& path, uint64_t end);

  FileSystem* const base_;
  mutable absl::Mutex mu_;
  std::map<std::string, FileState> files_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingRename> renames_ ABSL_GUARDED_BY(mu_);
  bool active_ ABSL_GUARDED_BY(mu_) = true;
  bool reject_direct_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t fail_nth_ ABSL_GUARDED_BY(mu_) = 0;  // 0: off
  Status fail_nth_status_ ABSL_GUARDED_BY(mu_);
  uint64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;  // requests seen since arming
  bool no_space_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t space_left_ ABSL_GUARDED_BY(mu_) = 0;
  int failing_syncs_ ABSL_GUARDED_BY(mu_) = 0;
  Status sync_status_ ABSL_GUARDED_BY(mu_);
  bool crash_armed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t writes_before_crash_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t write_requests_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_STORAGE_FAULT_INJECTION_FILE_SYSTEM_H_
