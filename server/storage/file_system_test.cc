#include "server/storage/file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/storage/posix_file_system.h"
#include "server/storage/testing/test_util.h"
#include "server/storage/uring_file_system.h"
#include "transport/buffer.h"

namespace stagger::server {
namespace {

using storage_internal::TempDir;
using transport::Buffer;

std::unique_ptr<FileSystem> MakeFs(const std::string& kind, unsigned depth) {
  if (kind == "posix") return std::make_unique<PosixFileSystem>();
  UringFileSystemOptions o;
  o.queue_depth = depth;
  auto fs = UringFileSystem::Create(o);
  if (!fs.ok()) return nullptr;
  return std::move(*fs);
}

class FileSystemTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    fs_ = MakeFs(GetParam(), 4);
    if (fs_ == nullptr) GTEST_SKIP() << "io_uring unavailable on this kernel";
  }
  std::unique_ptr<File> OpenRW(const std::string& name, bool direct = false) {
    FileOptions o;
    o.create = o.writable = true;
    o.direct = direct;
    auto f = fs_->Open(JoinPath(dir_.path(), name), o);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? std::move(*f) : nullptr;
  }
  TempDir dir_;
  std::unique_ptr<FileSystem> fs_;
};

TEST_P(FileSystemTest, BatchedWritesAndReadsRoundTrip) {
  auto f = OpenRW("data");
  ASSERT_NE(f, nullptr);
  std::mt19937_64 rng(7);
  // 40 requests against a queue depth of 4: the batch is refilled as
  // completions arrive, in any order.
  std::vector<std::string> chunks;
  std::vector<WriteRequest> writes;
  uint64_t offset = 0;
  for (int i = 0; i < 40; ++i) {
    std::string s(1 + rng() % 20000, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    chunks.push_back(std::move(s));
  }
  for (const std::string& s : chunks) {
    writes.push_back(WriteRequest{offset, s.data(), s.size()});
    offset += s.size();
  }
  ASSERT_TRUE(f->WriteAt(writes).ok());
  ASSERT_TRUE(f->Sync().ok());
  EXPECT_EQ(*f->Size(), offset);

  std::vector<std::string> back(chunks.size());
  std::vector<ReadRequest> reads;
  for (size_t i = 0; i < chunks.size(); ++i) {
    back[i].assign(chunks[i].size(), '\0');
    reads.push_back(
        ReadRequest{writes[i].offset, back[i].data(), back[i].size()});
  }
  ASSERT_TRUE(f->ReadAt(absl::MakeSpan(reads)).ok());
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(reads[i].bytes_read, chunks[i].size());
    EXPECT_EQ(back[i], chunks[i]) << "request " << i;
  }
}

TEST_P(FileSystemTest, ReadPastEndIsShortNotError) {
  auto f = OpenRW("short");
  ASSERT_NE(f, nullptr);
  std::string data(5000, 'x');
  WriteRequest w{0, data.data(), data.size()};
  ASSERT_TRUE(f->WriteAt(absl::MakeSpan(&w, 1)).ok());
  std::string buf(8192, '\0');
  ReadRequest r[2] = {{4096, buf.data(), 4096},
                      {10000, buf.data() + 4096, 100}};
  ASSERT_TRUE(f->ReadAt(absl::MakeSpan(r, 2)).ok());
  EXPECT_EQ(r[0].bytes_read, 5000u - 4096u);
  EXPECT_EQ(r[1].bytes_read, 0u);
}

TEST_P(FileSystemTest, MissingFileIsNotFoundNamingPath) {
  std::string path = JoinPath(dir_.path(), "nope");
  auto f = fs_->Open(path, FileOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find(path), std::string::npos);
  EXPECT_NE(f.status().message().find(std::strerror(ENOENT)),
            std::string::npos);
}

TEST_P(FileSystemTest, ExclusiveCreateRefusesExistingFile) {
  ASSERT_NE(OpenRW("x"), nullptr);
  FileOptions o;
  o.create = o.writable = o.exclusive = true;
  auto f = fs_->Open(JoinPath(dir_.path(), "x"), o);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(std::strerror(EEXIST)),
            std::string::npos);
}

TEST_P(FileSystemTest, DirectoryOperations) {
  std::string nested = JoinPath(dir_.path(), "a/b/c");
  ASSERT_TRUE(fs_->CreateDirs(nested).ok());
  ASSERT_TRUE(fs_->CreateDirs(nested).ok());  // idempotent
  EXPECT_TRUE(*fs_->IsDirectory(nested));
  ASSERT_NE(OpenRW("a/b/c/f1"), nullptr);
  ASSERT_NE(OpenRW("a/b/c/f2"), nullptr);
  auto names = fs_->ListDir(nested);
  ASSERT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"f1", "f2"}));
  EXPECT_TRUE(fs_->SyncDir(nested).ok());
  std::string f1 = JoinPath(nested, "f1");
  ASSERT_TRUE(fs_->Truncate(f1, 12345).ok());
  EXPECT_EQ(*(*fs_->Open(f1, FileOptions{}))->Size(), 12345u);
  EXPECT_FALSE(*fs_->IsDirectory(f1));
  ASSERT_TRUE(fs_->Remove(f1).ok());
  EXPECT_FALSE(*fs_->Exists(f1));
  EXPECT_EQ(fs_->Remove(f1).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(fs_->Remove(JoinPath(nested, "f2")).ok());
  ASSERT_TRUE(fs_->Remove(nested).ok());
  EXPECT_FALSE(*fs_->Exists(nested));
  EXPECT_EQ(fs_->ListDir(nested).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(FileSystemTest, DirectIOOnDiskTempDir) {
  auto f = OpenRW("direct", /*direct=*/true);
  ASSERT_NE(f, nullptr);
  if (!f->direct_io()) GTEST_SKIP() << "temp dir's filesystem refuses O_DIRECT";
  Buffer b(64 << 10);
  std::memset(b.data(), 0xab, b.size());
  WriteRequest w[2] = {{0, b.data(), 32 << 10},
                       {32 << 10, b.data() + (32 << 10), 32 << 10}};
  ASSERT_TRUE(
      f->WriteAt(absl::MakeSpan(w, 2), IOOptions{IOPriority::kLow}).ok());
  ASSERT_TRUE(f->Sync().ok());
  Buffer back(64 << 10);
  ReadRequest r{0, back.data(), back.size()};
  ASSERT_TRUE(f->ReadAt(absl::MakeSpan(&r, 1)).ok());
  EXPECT_EQ(r.bytes_read, back.size());
  EXPECT_EQ(std::memcmp(back.data(), b.data(), b.size()), 0);
}

TEST_P(FileSystemTest, DirectIOFallsBackWhereRefused) {
  // tmpfs refused O_DIRECT before Linux 6.6; newer kernels accept it.
  if (access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no writable /dev/shm";
  TempDir shm("/dev/shm");
  ASSERT_TRUE(shm.ok());
  std::string probe = JoinPath(shm.path(), "probe");
  int fd = ::open(probe.c_str(), O_CREAT | O_RDWR | O_DIRECT, 0644);
  if (fd >= 0) {
    ::close(fd);
    GTEST_SKIP() << "tmpfs accepts O_DIRECT on this kernel";
  }
  ASSERT_EQ(errno, EINVAL);
  FileOptions o;
  o.create = o.writable = o.direct = true;
  auto f = fs_->Open(JoinPath(shm.path(), "seg"), o);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE((*f)->direct_io());
  std::string data = "buffered after all";
  WriteRequest w{0, data.data(), data.size()};
  EXPECT_TRUE((*f)->WriteAt(absl::MakeSpan(&w, 1)).ok());
  EXPECT_EQ(*(*f)->Size(), data.size());
}

INSTANTIATE_TEST_SUITE_P(Impls, FileSystemTest,
                         ::testing::Values("io_uring", "posix"),
                         [](const auto& info) {
                           return info.param == "io_uring" ? "Uring" : "Posix";
                         });

TEST(IoErrorTest, MapsErrnoToCodesAndNamesPath) {
  Status s = IoError("write", "/x/y.seg", ENOSPC);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("/x/y.seg"), std::string::npos);
  EXPECT_NE(s.message().find(std::strerror(ENOSPC)), std::string::npos);
  EXPECT_EQ(IoError("write", "p", EDQUOT).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(IoError("open", "p", ENOENT).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(IoError("open", "p", EACCES).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(IoError("write", "p", EIO).code(), absl::StatusCode::kInternal);
}

TEST(NewDefaultFileSystemTest, PrefersIoUring) {
  auto fs = NewDefaultFileSystem(8);
  ASSERT_TRUE(fs.ok());
  auto probe = UringFileSystem::Create(UringFileSystemOptions{8});
  EXPECT_EQ((*fs)->Name(), probe.ok() ? "io_uring" : "posix");
  EXPECT_EQ(NewDefaultFileSystem(0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class UringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    auto fs = UringFileSystem::Create(UringFileSystemOptions{8});
    if (!fs.ok()) GTEST_SKIP() << fs.status();
    fs_ = std::move(*fs);
  }
  TempDir dir_;
  std::unique_ptr<UringFileSystem> fs_;
};

TEST_F(UringTest, RegisteredBuffersUseFixedWrites) {
  std::vector<Buffer> bufs;
  std::vector<iovec> iovs;
  for (int i = 0; i < 3; ++i) {
    bufs.emplace_back(1 << 20);
    std::memset(bufs.back().data(), 'a' + i, bufs.back().size());
    iovs.push_back({bufs.back().data(), bufs.back().size()});
  }
  ASSERT_TRUE(fs_->RegisterBuffers(iovs).ok());
  FileOptions o;
  o.create = o.writable = true;
  auto f = fs_->Open(JoinPath(dir_.path(), "fixed"), o);
  ASSERT_TRUE(f.ok());
  // Two slices inside registered buffers, one from ordinary memory.
  std::string plain(4096, 'z');
  WriteRequest w[3] = {{0, bufs[0].data(), 8192},
                       {8192, bufs[2].data() + 4096, 4096},
                       {12288, plain.data(), plain.size()}};
  auto before = fs_->stats();
  ASSERT_TRUE((*f)->WriteAt(absl::MakeSpan(w, 3)).ok());
  auto after = fs_->stats();
  EXPECT_EQ(after.fixed_requests - before.fixed_requests, 2u);
  EXPECT_EQ(after.plain_requests - before.plain_requests, 1u);
  std::string got = storage_internal::ReadFileBytes((*f)->path());
  EXPECT_EQ(got, std::string(8192, 'a') + std::string(4096, 'c') + plain);
  fs_->UnregisterBuffers();
}

TEST_F(UringTest, RegistrationFailureFallsBackToPlainWrites) {
  // The kernel refuses a null buffer (EFAULT), as it refuses one over
  // RLIMIT_MEMLOCK (ENOMEM): either way I/O must go on unregistered.
  iovec bad{nullptr, 4096};
  Status s = fs_->RegisterBuffers(absl::MakeConstSpan(&bad, 1));
  EXPECT_FALSE(s.ok());
  FileOptions o;
  o.create = o.writable = true;
  auto f = fs_->Open(JoinPath(dir_.path(), "plain"), o);
  ASSERT_TRUE(f.ok());
  std::string data(10000, 'q');
  WriteRequest w{0, data.data(), data.size()};
  auto before = fs_->stats();
  ASSERT_TRUE((*f)->WriteAt(absl::MakeSpan(&w, 1)).ok());
  EXPECT_EQ(fs_->stats().plain_requests - before.plain_requests, 1u);
  EXPECT_EQ(fs_->stats().fixed_requests, before.fixed_requests);
  EXPECT_EQ(storage_internal::ReadFileBytes((*f)->path()), data);
}

TEST_F(UringTest, EachThreadGetsItsOwnRing) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<Status> results(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      FileOptions o;
      o.create = o.writable = true;
      auto f = fs_->Open(JoinPath(dir_.path(), "t" + std::to_string(t)), o);
      if (!f.ok()) {
        results[t] = f.status();
        return;
      }
      std::string data(100000, static_cast<char>('0' + t));
      std::vector<WriteRequest> w;
      for (size_t off = 0; off < data.size(); off += 10000) {
        w.push_back({off, data.data() + off, 10000});
      }
      results[t] = (*f)->WriteAt(w);
      if (results[t].ok()) results[t] = (*f)->Sync();
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(results[t].ok()) << results[t];
    EXPECT_EQ(storage_internal::ReadFileBytes(
                  JoinPath(dir_.path(), "t" + std::to_string(t))),
              std::string(100000, static_cast<char>('0' + t)));
  }
  EXPECT_EQ(fs_->stats().posix_requests, 0u);
  EXPECT_EQ(fs_->stats().syncs, static_cast<uint64_t>(kThreads));
}

}  // namespace
}  // namespace stagger::server
