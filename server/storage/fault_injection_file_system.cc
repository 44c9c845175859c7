#include "server/storage/fault_injection_file_system.h"

#include <algorithm>
#include <cerrno>
#include <random>

namespace stagger::server {
namespace {

std::string ParentDir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string StripTrailingSlash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

Status Inactive(const std::string& op, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(op, " ", path, ": file system inactive (simulated crash)"));
}

Result<std::string> ReadAll(FileSystem* fs, const std::string& path) {
  STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<File> f, fs->Open(path, {}));
  STAGGER_ASSIGN_OR_RETURN(uint64_t size, f->Size());
  std::string bytes(size, '\0');
  ReadRequest r{0, bytes.data(), bytes.size()};
  STAGGER_RETURN_IF_ERROR(f->ReadAt(absl::MakeSpan(&r, 1)));
  bytes.resize(r.bytes_read);
  return bytes;
}

Status WriteAll(FileSystem* fs, const std::string& path,
                const std::string& bytes) {
  STAGGER_ASSIGN_OR_RETURN(bool exists, fs->Exists(path));
  if (exists) STAGGER_RETURN_IF_ERROR(fs->Truncate(path, 0));
  FileOptions o;
  o.create = o.writable = true;
  STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<File> f, fs->Open(path, o));
  WriteRequest w{0, bytes.data(), bytes.size()};
  STAGGER_RETURN_IF_ERROR(f->WriteAt(absl::MakeConstSpan(&w, 1)));
  return f->Sync();
}

}  // namespace

class FaultInjectionFileSystem::FaultFile final : public File {
 public:
  FaultFile(FaultInjectionFileSystem* fs, std::unique_ptr<File> base)
      : fs_(fs), base_(std::move(base)) {}

  Status WriteAt(absl::Span<const WriteRequest> writes,
                 const IOOptions& io) override {
    std::vector<WriteRequest> pass;
    pass.reserve(writes.size());
    Status injected;
    for (const WriteRequest& w : writes) {
      Status err;
      size_t n = fs_->Admit(path(), w.len, base_->direct_io(), &err);
      if (n > 0) pass.push_back(WriteRequest{w.offset, w.data, n});
      if (!err.ok() && injected.ok()) injected = err;
    }
    Status s;
    if (!pass.empty()) s = base_->WriteAt(pass, io);
    // Counted even when the base failed: some of them may have landed, and
    // DropUnsyncedData never extends a file.
    for (const WriteRequest& w : pass) fs_->Written(path(), w.offset + w.len);
    return injected.ok() ? s : injected;
  }

  Status ReadAt(absl::Span<ReadRequest> reads, const IOOptions& io) override {
    return base_->ReadAt(reads, io);
  }

  Status Sync(const IOOptions& io) override {
    Status s = fs_->BeforeSync();
    if (!s.ok()) return WithContext(s, absl::StrCat("fdatasync ", path()));
    // Only writes that completed before the sync started are covered.
    uint64_t end = fs_->WrittenEnd(path());
    STAGGER_RETURN_IF_ERROR(base_->Sync(io));
    fs_->Synced(path(), end);
    return absl::OkStatus();
  }

  Result<uint64_t> Size() override { return base_->Size(); }

  Result<bool> Allocate(uint64_t offset, uint64_t len) override {
    STAGGER_RETURN_IF_ERROR(fs_->AdmitAllocate(path(), len));
    return base_->Allocate(offset, len);
  }

  bool direct_io() const override { return base_->direct_io(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectionFileSystem* fs_;
  std::unique_ptr<File> base_;
};

FaultInjectionFileSystem::FaultInjectionFileSystem(FileSystem* base)
    : base_(base) {}

FaultInjectionFileSystem::~FaultInjectionFileSystem() = default;

void FaultInjectionFileSystem::FailNthWrite(uint64_t n, Status status) {
  absl::MutexLock l(&mu_);
  fail_nth_ = n;
  fail_nth_status_ = std::move(status);
  admitted_ = 0;
}

void FaultInjectionFileSystem::SetNoSpaceAfter(uint64_t bytes) {
  absl::MutexLock l(&mu_);
  no_space_ = true;
  space_left_ = bytes;
}

void FaultInjectionFileSystem::ClearNoSpace() {
  absl::MutexLock l(&mu_);
  no_space_ = false;
}

void FaultInjectionFileSystem::FailNextSyncs(int count, Status status) {
  absl::MutexLock l(&mu_);
  failing_syncs_ = count;
  sync_status_ = std::move(status);
}

void FaultInjectionFileSystem::CrashAfterWrites(uint64_t n) {
  absl::MutexLock l(&mu_);
  crash_armed_ = true;
  writes_before_crash_ = n;
  if (n == 0) active_ = false;
}

void FaultInjectionFileSystem::SetActive(bool active) {
  absl::MutexLock l(&mu_);
  active_ = active;
}

bool FaultInjectionFileSystem::active() const {
  absl::MutexLock l(&mu_);
  return active_;
}

void FaultInjectionFileSystem::SetRejectDirectIO(bool reject) {
  absl::MutexLock l(&mu_);
  reject_direct_ = reject;
}

uint64_t FaultInjectionFileSystem::write_requests() const {
  absl::MutexLock l(&mu_);
  return write_requests_;
}

uint64_t FaultInjectionFileSystem::syncs() const {
  absl::MutexLock l(&mu_);
  return syncs_;
}

Status FaultInjectionFileSystem::AdmitAllocate(const std::string& path,
                                               uint64_t len) {
  absl::MutexLock l(&mu_);
  if (!active_) return Inactive("fallocate", path);
  // Reserving counts nothing against the space left (the bytes are
  // charged when written) but fails where the disk could not hold them.
  if (no_space_ && len > space_left_) return IoError("fallocate", path, ENOSPC);
  return absl::OkStatus();
}

size_t FaultInjectionFileSystem::Admit(const std::string& path, size_t len,
                                       bool direct, Status* error) {
  absl::MutexLock l(&mu_);
  if (!active_) {
    *error = Inactive("write", path);
    return 0;
  }
  ++admitted_;
  if (fail_nth_ != 0 && admitted_ == fail_nth_) {
    fail_nth_ = 0;
    *error = WithContext(fail_nth_status_, absl::StrCat("write ", path));
    return 0;
  }
  size_t n = len;
  if (no_space_ && space_left_ < len) {
    n = static_cast<size_t>(space_left_);
    // An O_DIRECT write can only stop at a block boundary.
    if (direct) n -= n % 4096;
    *error = IoError("write", path, ENOSPC);
  }
  if (no_space_) space_left_ -= n;
  if (error->ok()) {
    ++write_requests_;
    if (crash_armed_ && --writes_before_crash_ == 0) {
      crash_armed_ = false;
      active_ = false;
    }
  }
  return n;
}

void FaultInjectionFileSystem::Written(const std::string& path, uint64_t end) {
  absl::MutexLock l(&mu_);
  FileState& st = files_[path];
  if (end > st.written_end) st.written_end = end;
}

uint64_t FaultInjectionFileSystem::WrittenEnd(const std::string& path) {
  absl::MutexLock l(&mu_);
  return files_[path].written_end;
}

Status FaultInjectionFileSystem::BeforeSync() {
  absl::MutexLock l(&mu_);
  if (!active_)
    return absl::UnavailableError("file system inactive (simulated crash)");
  if (failing_syncs_ > 0) {
    --failing_syncs_;
    return sync_status_;
  }
  return absl::OkStatus();
}

void FaultInjectionFileSystem::Synced(const std::string& path, uint64_t end) {
  absl::MutexLock l(&mu_);
  FileState& st = files_[path];
  if (end > st.synced_size) st.synced_size = end;
  ++syncs_;
}

Status FaultInjectionFileSystem::DropUnsyncedData(CrashMode mode,
                                                  uint32_t seed) {
  std::mt19937_64 rng(seed);
  absl::MutexLock l(&mu_);
  Status first = UndoRenames();
  for (auto it = files_.begin(); it != files_.end();) {
    const std::string& path = it->first;
    FileState& st = it->second;
    if (!st.entry_durable) {
      Status s = base_->Remove(path);
      if (!s.ok() && !absl::IsNotFound(s) && first.ok()) first = s;
      it = files_.erase(it);
      continue;
    }
    auto file = base_->Open(path, FileOptions{});
    if (!file.ok()) {
      if (!absl::IsNotFound(file.status()) && first.ok()) first = file.status();
      it = files_.erase(it);
      continue;
    }
    auto size = (*file)->Size();
    file->reset();
    if (!size.ok()) {
      if (first.ok()) first = size.status();
      ++it;
      continue;
    }
    uint64_t keep = st.synced_size;
    if (*size > keep) {
      if (mode == CrashMode::kTornTail) keep += rng() % (*size - keep + 1);
      Status s = base_->Truncate(path, keep);
      if (!s.ok() && first.ok()) first = s;
    } else {
      keep = *size;
    }
    st.synced_size = st.written_end = keep;
    ++it;
  }
  active_ = true;
  crash_armed_ = false;
  fail_nth_ = 0;
  no_space_ = false;
  failing_syncs_ = 0;
  return first;
}

Result<std::unique_ptr<File>> FaultInjectionFileSystem::Open(
    const std::string& path, const FileOptions& options) {
  FileOptions opts = options;
  bool is_new = false;
  if (options.writable) {
    absl::MutexLock l(&mu_);
    if (!active_) return Inactive("open", path);
    if (reject_direct_) opts.direct = false;
  }
  if (options.writable && options.create) {
    STAGGER_ASSIGN_OR_RETURN(bool exists, base_->Exists(path));
    is_new = !exists;
  }
  STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<File> file, base_->Open(path, opts));
  if (!options.writable) return file;
  uint64_t size = 0;
  if (!is_new) {
    STAGGER_ASSIGN_OR_RETURN(size, file->Size());
  }
  {
    absl::MutexLock l(&mu_);
    auto [it, inserted] = files_.try_emplace(path);
    if (inserted || is_new) {
      // A file the wrapper has not seen is taken as durable as it stands.
      it->second.synced_size = it->second.written_end = size;
      it->second.entry_durable = !is_new;
    }
  }
  return std::unique_ptr<File>(
      std::make_unique<FaultFile>(this, std::move(file)));
}

Status FaultInjectionFileSystem::CreateDirs(const std::string& path) {
  {
    absl::MutexLock l(&mu_);
    if (!active_) return Inactive("mkdir", path);
  }
  return base_->CreateDirs(path);
}

Result<std::vector<std::string>> FaultInjectionFileSystem::ListDir(
    const std::string& path) {
  return base_->ListDir(path);
}

Status FaultInjectionFileSystem::Remove(const std::string& path) {
  {
    absl::MutexLock l(&mu_);
    if (!active_) return Inactive("remove", path);
  }
  STAGGER_RETURN_IF_ERROR(base_->Remove(path));
  absl::MutexLock l(&mu_);
  files_.erase(path);
  return absl::OkStatus();
}

Status FaultInjectionFileSystem::Rename(const std::string& from,
                                        const std::string& to) {
  PendingRename r;
  r.from = from;
  r.to = to;
  {
    absl::MutexLock l(&mu_);
    if (!active_) return Inactive("rename", from);
  }
  // What `to` durably holds, to put back should the rename not survive.
  STAGGER_ASSIGN_OR_RETURN(r.had_old, base_->Exists(to));
  if (r.had_old) {
    STAGGER_ASSIGN_OR_RETURN(r.old_bytes, ReadAll(base_, to));
  }
  STAGGER_RETURN_IF_ERROR(base_->Rename(from, to));
  STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<File> moved, base_->Open(to, {}));
  STAGGER_ASSIGN_OR_RETURN(const uint64_t size, moved->Size());
  moved.reset();
  absl::MutexLock l(&mu_);
  if (auto old = files_.find(to); old != files_.end() && r.had_old) {
    r.old_bytes.resize(
        std::min<uint64_t>(r.old_bytes.size(), old->second.synced_size));
  }
  // A file the wrapper has not seen is taken as durable as it stands.
  FileState st{size, size, true};
  if (auto it = files_.find(from); it != files_.end()) {
    st = it->second;
    files_.erase(it);
  }
  r.from_durable = st.entry_durable;
  st.entry_durable = false;  // the new name, until its directory is synced
  files_[to] = st;
  renames_.push_back(std::move(r));
  return absl::OkStatus();
}

Status FaultInjectionFileSystem::UndoRenames() {
  Status first;
  for (auto r = renames_.rbegin(); r != renames_.rend(); ++r) {
    FileState st;
    if (auto it = files_.find(r->to); it != files_.end()) {
      st = it->second;
      files_.erase(it);
    }
    Status s;
    if (r->from_durable) {
      s = base_->Rename(r->to, r->from);
      st.entry_durable = true;
      files_[r->from] = st;
    } else {
      s = base_->Remove(r->to);
      if (absl::IsNotFound(s)) s = absl::OkStatus();
    }
    if (s.ok() && r->had_old) {
      s = WriteAll(base_, r->to, r->old_bytes);
      const uint64_t n = r->old_bytes.size();
      files_[r->to] = FileState{n, n, true};
    }
    if (!s.ok() && first.ok()) first = s;
  }
  renames_.clear();
  return first;
}

Result<bool> FaultInjectionFileSystem::Exists(const std::string& path) {
  return base_->Exists(path);
}

Result<bool> FaultInjectionFileSystem::IsDirectory(const std::string& path) {
  return base_->IsDirectory(path);
}

Status FaultInjectionFileSystem::Truncate(const std::string& path,
                                          uint64_t size) {
  {
    absl::MutexLock l(&mu_);
    if (!active_) return Inactive("truncate", path);
  }
  STAGGER_RETURN_IF_ERROR(base_->Truncate(path, size));
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it != files_.end()) {
    // Truncate is not durable until the next sync; shrinking is modelled as
    // immediate, which is the harsher choice for a reader.
    it->second.written_end = std::min(it->second.written_end, size);
    it->second.synced_size = std::min(it->second.synced_size, size);
  }
  return absl::OkStatus();
}

Status FaultInjectionFileSystem::SyncDir(const std::string& path) {
  {
    absl::MutexLock l(&mu_);
    if (!active_) return Inactive("fsync dir", path);
  }
  STAGGER_RETURN_IF_ERROR(base_->SyncDir(path));
  const std::string dir = StripTrailingSlash(path);
  absl::MutexLock l(&mu_);
  for (auto& [file, st] : files_) {
    if (ParentDir(file) == dir) st.entry_durable = true;
  }
  renames_.erase(std::remove_if(renames_.begin(), renames_.end(),
                                [&dir](const PendingRename& r) {
                                  return ParentDir(r.to) == dir;
                                }),
                 renames_.end());
  return absl::OkStatus();
}

Status FaultInjectionFileSystem::RegisterBuffers(
    absl::Span<const iovec> buffers) {
  return base_->RegisterBuffers(buffers);
}

void FaultInjectionFileSystem::UnregisterBuffers() {
  base_->UnregisterBuffers();
}

std::string FaultInjectionFileSystem::Name() const {
  return absl::StrCat("fault_injection(", base_->Name(), ")");
}

}  // namespace stagger::server
