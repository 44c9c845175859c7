#include "server/storage/fault_injection_file_system.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/storage/posix_file_system.h"
#include "server/storage/testing/test_util.h"

namespace stagger::server {
namespace {

using storage_internal::ReadFileBytes;
using storage_internal::TempDir;

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }
  std::unique_ptr<File> Create(const std::string& name) {
    FileOptions o;
    o.create = o.writable = true;
    auto f = fs_.Open(Path(name), o);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? std::move(*f) : nullptr;
  }
  std::string Path(const std::string& name) {
    return JoinPath(dir_.path(), name);
  }
  static Status Write(File* f, uint64_t off, const std::string& s) {
    WriteRequest w{off, s.data(), s.size()};
    return f->WriteAt(absl::MakeSpan(&w, 1));
  }
  TempDir dir_;
  PosixFileSystem base_;
  FaultInjectionFileSystem fs_{&base_};
};

TEST_F(FaultInjectionTest, FailNthWriteFailsOnlyThatRequest) {
  auto f = Create("f");
  fs_.FailNthWrite(3);
  std::string a(100, 'a'), b(100, 'b'), c(100, 'c'), d(100, 'd');
  std::vector<WriteRequest> w = {{0, a.data(), 100},
                                 {100, b.data(), 100},
                                 {200, c.data(), 100},
                                 {300, d.data(), 100}};
  Status s = f->WriteAt(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("injected"), std::string::npos);
  // Requests 1, 2 and 4 landed; 3 left a hole.
  EXPECT_EQ(ReadFileBytes(Path("f")), a + b + std::string(100, '\0') + d);
  // Once only.
  EXPECT_TRUE(Write(f.get(), 200, c).ok());
  EXPECT_EQ(ReadFileBytes(Path("f")), a + b + c + d);
  EXPECT_EQ(fs_.write_requests(), 4u);
}

TEST_F(FaultInjectionTest, NoSpaceIsResourceExhaustedAfterLimit) {
  auto f = Create("full");
  fs_.SetNoSpaceAfter(150);
  EXPECT_TRUE(Write(f.get(), 0, std::string(100, 'x')).ok());
  Status s = Write(f.get(), 100, std::string(100, 'y'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find(Path("full")), std::string::npos);
  // The crossing write stopped at the limit, like a real full disk.
  EXPECT_EQ(ReadFileBytes(Path("full")),
            std::string(100, 'x') + std::string(50, 'y'));
  EXPECT_EQ(Write(f.get(), 150, "z").code(),
            absl::StatusCode::kResourceExhausted);
  fs_.ClearNoSpace();
  EXPECT_TRUE(Write(f.get(), 150, "z").ok());
}

TEST_F(FaultInjectionTest, DropUnsyncedDataKeepsOnlySyncedBytes) {
  ASSERT_TRUE(fs_.SyncDir(dir_.path()).ok());  // nothing yet
  auto f = Create("log");
  ASSERT_TRUE(fs_.SyncDir(dir_.path()).ok());  // the entry is durable
  ASSERT_TRUE(Write(f.get(), 0, "durable|").ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(Write(f.get(), 8, "lost").ok());
  f.reset();
  EXPECT_EQ(ReadFileBytes(Path("log")), "durable|lost");
  ASSERT_TRUE(fs_.DropUnsyncedData().ok());
  EXPECT_EQ(ReadFileBytes(Path("log")), "durable|");
}

TEST_F(FaultInjectionTest, DropUnsyncedDataRemovesFilesWithoutDirSync) {
  auto f = Create("new");
  ASSERT_TRUE(Write(f.get(), 0, "synced but not linked").ok());
  ASSERT_TRUE(f->Sync().ok());
  f.reset();
  ASSERT_TRUE(fs_.DropUnsyncedData().ok());
  EXPECT_FALSE(*base_.Exists(Path("new")));
}

TEST_F(FaultInjectionTest, TornTailKeepsAPrefixOfUnsyncedBytes) {
  auto f = Create("torn");
  ASSERT_TRUE(fs_.SyncDir(dir_.path()).ok());
  ASSERT_TRUE(Write(f.get(), 0, std::string(1000, 's')).ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(Write(f.get(), 1000, std::string(9000, 'u')).ok());
  f.reset();
  ASSERT_TRUE(
      fs_.DropUnsyncedData(FaultInjectionFileSystem::CrashMode::kTornTail, 42)
          .ok());
  std::string got = ReadFileBytes(Path("torn"));
  ASSERT_GE(got.size(), 1000u);
  ASSERT_LE(got.size(), 10000u);
  EXPECT_EQ(got, std::string(1000, 's') + std::string(got.size() - 1000, 'u'));
}

TEST_F(FaultInjectionTest, CrashAfterWritesMakesFileSystemInactive) {
  auto f = Create("c");
  fs_.CrashAfterWrites(2);
  std::string x(10, 'x');
  std::vector<WriteRequest> w = {
      {0, x.data(), 10}, {10, x.data(), 10}, {20, x.data(), 10}};
  Status s = f->WriteAt(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(fs_.active());
  EXPECT_EQ(ReadFileBytes(Path("c")), std::string(20, 'x'));
  EXPECT_EQ(f->Sync().code(), absl::StatusCode::kUnavailable);
  FileOptions o;
  o.create = o.writable = true;
  EXPECT_EQ(fs_.Open(Path("d"), o).status().code(),
            absl::StatusCode::kUnavailable);
  f.reset();
  ASSERT_TRUE(fs_.DropUnsyncedData().ok());
  EXPECT_TRUE(fs_.active());
}

TEST_F(FaultInjectionTest, FailNextSyncs) {
  auto f = Create("s");
  fs_.FailNextSyncs(1);
  EXPECT_EQ(f->Sync().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(f->Sync().ok());
  EXPECT_EQ(fs_.syncs(), 1u);
}

TEST_F(FaultInjectionTest, RejectDirectIOOpensBuffered) {
  fs_.SetRejectDirectIO(true);
  FileOptions o;
  o.create = o.writable = o.direct = true;
  auto f = fs_.Open(Path("nd"), o);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE((*f)->direct_io());
  EXPECT_EQ(fs_.Name(), "fault_injection(posix)");
}

// The rename of a temporary file over an existing one (how a log is
// rewritten): undone by a crash until the directory is synced, kept after.
TEST_F(FaultInjectionTest, ARenameLastsOnlyOnceItsDirectoryIsSynced) {
  {
    auto f = Create("log");
    ASSERT_TRUE(Write(f.get(), 0, "old entries").ok());
    ASSERT_TRUE(f->Sync().ok());
  }
  ASSERT_TRUE(fs_.SyncDir(dir_.path()).ok());
  auto write_tmp = [&](const std::string& bytes) {
    auto f = Create("log.tmp");
    ASSERT_TRUE(Write(f.get(), 0, bytes).ok());
    ASSERT_TRUE(f->Sync().ok());
  };
  write_tmp("new");
  ASSERT_TRUE(fs_.Rename(Path("log.tmp"), Path("log")).ok());
  EXPECT_EQ(ReadFileBytes(Path("log")), "new");
  ASSERT_TRUE(fs_.DropUnsyncedData().ok());
  EXPECT_EQ(ReadFileBytes(Path("log")), "old entries");
  EXPECT_FALSE(*base_.Exists(Path("log.tmp")));  // never durable itself

  write_tmp("newer");
  ASSERT_TRUE(fs_.Rename(Path("log.tmp"), Path("log")).ok());
  ASSERT_TRUE(fs_.SyncDir(dir_.path()).ok());
  ASSERT_TRUE(fs_.DropUnsyncedData().ok());
  EXPECT_EQ(ReadFileBytes(Path("log")), "newer");
  EXPECT_FALSE(*base_.Exists(Path("log.tmp")));
}

TEST_F(FaultInjectionTest, ARenamedFileKeepsOnlyWhatWasSynced) {
  {
    auto f = Create("a");
    ASSERT_TRUE(Write(f.get(), 0, "synced").ok());
    ASSERT_TRUE(f->Sync().ok());
    ASSERT_TRUE(Write(f.get(), 6, " and not").ok());
  }
  ASSERT_TRUE(fs_.SyncDir(dir_.path()).ok());
  // A durable file renamed to a new name: the crash puts the old name back,
  // with its synced bytes only.
  ASSERT_TRUE(fs_.Rename(Path("a"), Path("b")).ok());
  ASSERT_TRUE(fs_.DropUnsyncedData().ok());
  EXPECT_FALSE(*base_.Exists(Path("b")));
  EXPECT_EQ(ReadFileBytes(Path("a")), "synced");
  // Inactive: refused, nothing moved.
  fs_.SetActive(false);
  EXPECT_EQ(fs_.Rename(Path("a"), Path("b")).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(*base_.Exists(Path("a")));
  fs_.SetActive(true);
  EXPECT_EQ(fs_.Rename(Path("missing"), Path("b")).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace stagger::server
