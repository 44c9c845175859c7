#include "server/testing/fault_injection_rocks_fs.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace stagger::server_internal {
namespace {

std::string ParentDir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string StripTrailingSlash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

Status FromIo(const rocksdb::IOStatus& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

}  // namespace

class FaultInjectionRocksFs::File : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  File(FaultInjectionRocksFs* fs, std::string fname,
       std::unique_ptr<rocksdb::FSWritableFile> base, uint64_t size)
      : FSWritableFileOwnerWrapper(std::move(base)),
        fs_(fs),
        fname_(std::move(fname)),
        end_(size) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& io,
                           rocksdb::IODebugContext* dbg) override {
    if (!fs_->Active()) return fs_->Inactive("append " + fname_);
    rocksdb::IOStatus s = target()->Append(data, io, dbg);
    if (s.ok()) Advance(end_ + data.size());
    return s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& io,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    if (!fs_->Active()) return fs_->Inactive("append " + fname_);
    rocksdb::IOStatus s = target()->Append(data, io, info, dbg);
    if (s.ok()) Advance(end_ + data.size());
    return s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& io,
                                     rocksdb::IODebugContext* dbg) override {
    if (!fs_->Active()) return fs_->Inactive("append " + fname_);
    rocksdb::IOStatus s = target()->PositionedAppend(data, offset, io, dbg);
    if (s.ok()) Advance(std::max(end_, offset + data.size()));
    return s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& io,
                                     const rocksdb::DataVerificationInfo& info,
                                     rocksdb::IODebugContext* dbg) override {
    if (!fs_->Active()) return fs_->Inactive("append " + fname_);
    rocksdb::IOStatus s =
        target()->PositionedAppend(data, offset, io, info, dbg);
    if (s.ok()) Advance(std::max(end_, offset + data.size()));
    return s;
  }
  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& io,
                             rocksdb::IODebugContext* dbg) override {
    if (!fs_->Active()) return fs_->Inactive("truncate " + fname_);
    rocksdb::IOStatus s = target()->Truncate(size, io, dbg);
    if (s.ok()) end_ = size;
    return s;
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& io,
                         rocksdb::IODebugContext* dbg) override {
    if (!fs_->Active()) return fs_->Inactive("sync " + fname_);
    rocksdb::IOStatus s = target()->Sync(io, dbg);
    if (s.ok()) fs_->Synced(fname_);
    return s;
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& io,
                          rocksdb::IODebugContext* dbg) override {
    if (!fs_->Active()) return fs_->Inactive("fsync " + fname_);
    rocksdb::IOStatus s = target()->Fsync(io, dbg);
    if (s.ok()) fs_->Synced(fname_);
    return s;
  }

 private:
  void Advance(uint64_t end) {
    end_ = end;
    fs_->Appended(fname_, end);
  }

  FaultInjectionRocksFs* const fs_;
  const std::string fname_;
  uint64_t end_;  // RocksDB appends to a file from one thread at a time
};

class FaultInjectionRocksFs::Directory : public rocksdb::FSDirectoryWrapper {
 public:
  Directory(FaultInjectionRocksFs* fs, std::string name,
            std::unique_ptr<rocksdb::FSDirectory> base)
      : FSDirectoryWrapper(std::move(base)),
        fs_(fs),
        name_(StripTrailingSlash(std::move(name))) {}

  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& io,
                          rocksdb::IODebugContext* dbg) override {
    if (!fs_->Active()) return fs_->Inactive("fsync " + name_);
    rocksdb::IOStatus s = FSDirectoryWrapper::Fsync(io, dbg);
    if (s.ok()) fs_->DirSynced(name_);
    return s;
  }
  rocksdb::IOStatus FsyncWithDirOptions(
      const rocksdb::IOOptions& io, rocksdb::IODebugContext* dbg,
      const rocksdb::DirFsyncOptions& options) override {
    if (!fs_->Active()) return fs_->Inactive("fsync " + name_);
    rocksdb::IOStatus s =
        FSDirectoryWrapper::FsyncWithDirOptions(io, dbg, options);
    if (s.ok()) fs_->DirSynced(name_);
    return s;
  }

 private:
  FaultInjectionRocksFs* const fs_;
  const std::string name_;
};

FaultInjectionRocksFs::FaultInjectionRocksFs(std::function<bool()> active)
    : FileSystemWrapper(rocksdb::FileSystem::Default()),
      active_(std::move(active)) {}

rocksdb::IOStatus FaultInjectionRocksFs::Inactive(
    const std::string& what) const {
  return rocksdb::IOStatus::IOError(what,
                                    "file system inactive (simulated crash)");
}

rocksdb::IOStatus FaultInjectionRocksFs::Track(
    const std::string& fname, bool existed,
    std::unique_ptr<rocksdb::FSWritableFile>* r) {
  uint64_t size = 0;
  if (existed) {
    rocksdb::IOStatus s =
        target()->GetFileSize(fname, rocksdb::IOOptions(), &size, nullptr);
    if (!s.ok()) return s;
  }
  {
    absl::MutexLock l(&mu_);
    auto [it, inserted] = files_.try_emplace(fname);
    if (inserted || !existed) {
      // A file not seen before is taken as durable as it stands.
      it->second = FileState{size, size, existed};
    }
  }
  *r = std::make_unique<File>(this, fname, std::move(*r), size);
  return rocksdb::IOStatus::OK();
}

rocksdb::IOStatus FaultInjectionRocksFs::NewWritableFile(
    const std::string& fname, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* r, rocksdb::IODebugContext* dbg) {
  if (!Active()) return Inactive("create " + fname);
  // A file created over an existing one starts empty.
  rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, r, dbg);
  if (!s.ok()) return s;
  {
    absl::MutexLock l(&mu_);
    files_.erase(fname);
  }
  return Track(fname, /*existed=*/false, r);
}

rocksdb::IOStatus FaultInjectionRocksFs::ReopenWritableFile(
    const std::string& fname, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* r, rocksdb::IODebugContext* dbg) {
  if (!Active()) return Inactive("open " + fname);
  const bool existed =
      target()->FileExists(fname, rocksdb::IOOptions(), nullptr).ok();
  rocksdb::IOStatus s = target()->ReopenWritableFile(fname, opts, r, dbg);
  if (!s.ok()) return s;
  return Track(fname, existed, r);
}

rocksdb::IOStatus FaultInjectionRocksFs::ReuseWritableFile(
    const std::string& fname, const std::string& old_fname,
    const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* r, rocksdb::IODebugContext* dbg) {
  if (!Active()) return Inactive("create " + fname);
  rocksdb::IOStatus s =
      target()->ReuseWritableFile(fname, old_fname, opts, r, dbg);
  if (!s.ok()) return s;
  {
    absl::MutexLock l(&mu_);
    files_.erase(old_fname);
    files_.erase(fname);
  }
  return Track(fname, /*existed=*/false, r);
}

rocksdb::IOStatus FaultInjectionRocksFs::NewDirectory(
    const std::string& name, const rocksdb::IOOptions& io,
    std::unique_ptr<rocksdb::FSDirectory>* r, rocksdb::IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSDirectory> base;
  rocksdb::IOStatus s = target()->NewDirectory(name, io, &base, dbg);
  if (!s.ok()) return s;
  *r = std::make_unique<Directory>(this, name, std::move(base));
  return s;
}

rocksdb::IOStatus FaultInjectionRocksFs::RenameFile(
    const std::string& src, const std::string& target_name,
    const rocksdb::IOOptions& io, rocksdb::IODebugContext* dbg) {
  if (!Active()) return Inactive("rename " + src);
  PendingRename r;
  r.from = src;
  r.to = target_name;
  r.had_old = target()->FileExists(target_name, io, dbg).ok();
  if (r.had_old) {
    rocksdb::IOStatus s =
        rocksdb::ReadFileToString(target(), target_name, &r.old_bytes);
    if (!s.ok()) return s;
  }
  rocksdb::IOStatus s = target()->RenameFile(src, target_name, io, dbg);
  if (!s.ok()) return s;
  uint64_t size = 0;
  s = target()->GetFileSize(target_name, io, &size, dbg);
  if (!s.ok()) return s;
  absl::MutexLock l(&mu_);
  if (auto old = files_.find(target_name); old != files_.end() && r.had_old) {
    r.old_bytes.resize(
        std::min<uint64_t>(r.old_bytes.size(), old->second.synced));
  }
  FileState st{size, size, true};
  if (auto it = files_.find(src); it != files_.end()) {
    st = it->second;
    files_.erase(it);
  }
  r.from_durable = st.entry_durable;
  st.entry_durable = false;
  files_[target_name] = st;
  renames_.push_back(std::move(r));
  return rocksdb::IOStatus::OK();
}

rocksdb::IOStatus FaultInjectionRocksFs::DeleteFile(
    const std::string& fname, const rocksdb::IOOptions& io,
    rocksdb::IODebugContext* dbg) {
  if (!Active()) return Inactive("delete " + fname);
  rocksdb::IOStatus s = target()->DeleteFile(fname, io, dbg);
  if (s.ok()) {
    absl::MutexLock l(&mu_);
    files_.erase(fname);
  }
  return s;
}

void FaultInjectionRocksFs::Appended(const std::string& fname, uint64_t end) {
  absl::MutexLock l(&mu_);
  FileState& st = files_[fname];
  st.written = end;
}

void FaultInjectionRocksFs::Synced(const std::string& fname) {
  absl::MutexLock l(&mu_);
  FileState& st = files_[fname];
  st.synced = st.written;
}

void FaultInjectionRocksFs::DirSynced(const std::string& dir) {
  absl::MutexLock l(&mu_);
  for (auto& [name, st] : files_) {
    if (ParentDir(name) == dir) st.entry_durable = true;
  }
  renames_.erase(std::remove_if(renames_.begin(), renames_.end(),
                                [&dir](const PendingRename& r) {
                                  return ParentDir(r.to) == dir;
                                }),
                 renames_.end());
}

uint64_t FaultInjectionRocksFs::dropped_bytes() const {
  absl::MutexLock l(&mu_);
  return dropped_;
}

Status FaultInjectionRocksFs::DropUnsyncedData() {
  absl::MutexLock l(&mu_);
  Status first;
  const rocksdb::IOOptions io;
  for (auto r = renames_.rbegin(); r != renames_.rend(); ++r) {
    FileState st;
    if (auto it = files_.find(r->to); it != files_.end()) {
      st = it->second;
      files_.erase(it);
    }
    if (r->from_durable) {
      first.Update(FromIo(target()->RenameFile(r->to, r->from, io, nullptr),
                          "undo rename of " + r->from));
      st.entry_durable = true;
      files_[r->from] = st;
    } else {
      target()->DeleteFile(r->to, io, nullptr);
    }
    if (r->had_old) {
      first.Update(
          FromIo(rocksdb::WriteStringToFile(target(), r->old_bytes, r->to,
                                            /*should_sync=*/true),
                 "restore " + r->to));
      const uint64_t n = r->old_bytes.size();
      files_[r->to] = FileState{n, n, true};
    }
  }
  renames_.clear();
  for (auto it = files_.begin(); it != files_.end();) {
    const std::string& name = it->first;
    const FileState& st = it->second;
    if (!st.entry_durable) {
      dropped_ += st.written;
      target()->DeleteFile(name, io, nullptr);
      it = files_.erase(it);
      continue;
    }
    uint64_t size = 0;
    if (target()->GetFileSize(name, io, &size, nullptr).ok() &&
        size > st.synced) {
      dropped_ += size - st.synced;
    }
    if (size > st.synced && ::truncate(name.c_str(), st.synced) != 0) {
      first.Update(absl::InternalError(
          absl::StrCat("truncate ", name, ": ", std::strerror(errno))));
    }
    it->second.written = std::min(size, st.synced);
    it->second.synced = it->second.written;
    ++it;
  }
  return first;
}

}  // namespace stagger::server_internal
