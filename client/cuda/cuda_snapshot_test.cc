// CUDA snapshot source. Tests that need a device skip without one; the
// first test checks what a machine without a device (or a build without
// CUDA) gets instead.
#include "client/cuda/cuda_snapshot.h"

#include <gtest/gtest.h>

#include <string>

#ifdef STAGGER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>
#endif

namespace stagger::client {
namespace {

TEST(CudaSnapshotWithoutDevice, FactoryExplainsWhy) {
  if (CudaDeviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  for (bool device_snapshot : {false, true}) {
    CudaSnapshotOptions options;
    options.device_snapshot = device_snapshot;
    auto source = NewCudaSnapshotSource(options);
    ASSERT_FALSE(source.ok());
    const std::string message(source.status().message());
#ifdef STAGGER_HAVE_CUDA
    EXPECT_EQ(source.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(message.find("CUDA device"), std::string::npos) << message;
#else
    EXPECT_EQ(source.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(message, "this build has no CUDA support");
#endif
  }
}

#ifdef STAGGER_HAVE_CUDA

#define ASSERT_CUDA(expr)                                    \
  do {                                                       \
    cudaError_t cuda_error_ = (expr);                        \
    ASSERT_EQ(cuda_error_, cudaSuccess)                      \
        << #expr << ": " << cudaGetErrorString(cuda_error_); \
  } while (0)

constexpr auto kWaitLimit = std::chrono::seconds(60);
constexpr uint64_t kMiB = 1 << 20;

// cudaMalloc'd memory, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t len) : len_(len) {
    if (cudaMalloc(&ptr_, len) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  char* get() const { return static_cast<char*>(ptr_); }
  size_t size() const { return len_; }

 private:
  void* ptr_ = nullptr;
  size_t len_;
};

// Page-aligned host memory, as the staging pool hands out.
class HostBuffer {
 public:
  explicit HostBuffer(size_t len)
      : len_(len),
        ptr_(static_cast<char*>(std::aligned_alloc(4096, RoundUp(len)))) {
    std::memset(ptr_, 0xEE, len_);
  }
  ~HostBuffer() { std::free(ptr_); }
  char* get() const { return ptr_; }
  size_t size() const { return len_; }

 private:
  static size_t RoundUp(size_t n) { return (n + 4095) / 4096 * 4096; }
  size_t len_;
  char* ptr_;
};

// Seeded bytes, the same every run.
std::vector<char> Pattern(size_t len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<char> out(len);
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, len - i));
  }
  return out;
}

// "" when equal, else where they first differ.
std::string Compare(const char* got, const char* want, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    if (got[i] != want[i]) {
      return "first difference at byte " + std::to_string(i) + " of " +
             std::to_string(len) + ": got " +
             std::to_string(static_cast<unsigned char>(got[i])) + ", want " +
             std::to_string(static_cast<unsigned char>(want[i]));
    }
  }
  return "";
}

// Holds a stream at a point of its queue until opened (or 30 s pass), so
// work queued behind it is certainly not done yet when the test moves on.
class StreamGate {
 public:
  // `stream` is owned unless it is cudaStreamLegacy.
  explicit StreamGate(cudaStream_t stream) : stream_(stream) {}
  ~StreamGate() {
    Open();
    (void)cudaStreamSynchronize(stream_);
    if (stream_ != cudaStreamLegacy) (void)cudaStreamDestroy(stream_);
  }
  cudaStream_t stream() const { return stream_; }
  cudaError_t Close() { return cudaLaunchHostFunc(stream_, &Hold, this); }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool timed_out() {
    std::lock_guard<std::mutex> l(mu_);
    return timed_out_;
  }

 private:
  static void Hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    std::unique_lock<std::mutex> l(gate->mu_);
    if (!gate->cv_.wait_for(l, std::chrono::seconds(30),
                            [gate] { return gate->open_; })) {
      gate->timed_out_ = true;
    }
  }
  cudaStream_t stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  bool timed_out_ = false;
};

// The two callbacks of one Copy(): how often each ran, in which order, and
// with which status.
class CopyRecord {
 public:
  CopyCallback Captured() {
    return [this](const Status& s) {
      std::lock_guard<std::mutex> l(mu_);
      ++captured_calls_;
      captured_ = s;
      cv_.notify_all();
    };
  }
  CopyCallback OnHost() {
    return [this](const Status& s) {
      std::lock_guard<std::mutex> l(mu_);
      if (captured_calls_ == 0) on_host_first_ = true;
      ++host_calls_;
      host_ = s;
      cv_.notify_all();
    };
  }
  Status WaitCaptured() { return Wait(&captured_calls_, &captured_); }
  Status WaitHost() { return Wait(&host_calls_, &host_); }
  // Both callbacks ran exactly once, captured first.
  bool RanOnceInOrder() {
    std::lock_guard<std::mutex> l(mu_);
    return captured_calls_ == 1 && host_calls_ == 1 && !on_host_first_;
  }

 private:
  Status Wait(int* calls, Status* status) {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, kWaitLimit, [calls] { return *calls > 0; })) {
      return absl::DeadlineExceededError("callback did not run");
    }
    return *status;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int captured_calls_ = 0;
  int host_calls_ = 0;
  bool on_host_first_ = false;
  Status captured_;
  Status host_;
};

class CudaSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      GTEST_SKIP() << "no CUDA device ("
                   << (e != cudaSuccess ? cudaGetErrorString(e)
                                        : "none visible")
                   << ")";
    }
  }

  // A source, as CudaSnapshotSource, or a failed assertion.
  static std::unique_ptr<CudaSnapshotSource> Make(
      const CudaSnapshotOptions& options) {
    auto source = NewCudaSnapshotSource(options);
    EXPECT_TRUE(source.ok()) << source.status();
    if (!source.ok()) return nullptr;
    auto* cuda = dynamic_cast<CudaSnapshotSource*>(source->get());
    EXPECT_NE(cuda, nullptr);
    if (cuda == nullptr) return nullptr;
    source->release();
    return std::unique_ptr<CudaSnapshotSource>(cuda);
  }

  // Copies [0, len) of `src` to `dst` in `chunk`-sized pieces, one record
  // per piece.
  static void CopyAll(SnapshotSource& source, char* dst, const char* src,
                      size_t len, size_t chunk,
                      std::vector<std::unique_ptr<CopyRecord>>& records) {
    for (size_t off = 0; off < len; off += chunk) {
      records.push_back(std::make_unique<CopyRecord>());
      source.Copy(dst + off, src + off, std::min(chunk, len - off),
                  records.back()->Captured(), records.back()->OnHost());
    }
  }

  static void WaitAllOk(std::vector<std::unique_ptr<CopyRecord>>& records) {
    for (auto& r : records) {
      EXPECT_TRUE(r->WaitCaptured().ok());
      EXPECT_TRUE(r->WaitHost().ok());
      EXPECT_TRUE(r->RanOnceInOrder());
    }
  }
};

TEST_F(CudaSnapshotTest, DeviceIsAvailable) {
  EXPECT_TRUE(CudaDeviceAvailable());
}

TEST_F(CudaSnapshotTest, CopiesOfSeveralSizesAreBitExact) {
  const std::vector<size_t> sizes = {1,    255,          4096,     65537,
                                     kMiB, 4 * kMiB + 3, 32 * kMiB};
  size_t total = 0;
  for (size_t s : sizes) total += s;
  const std::vector<char> want = Pattern(total, 1);
  DeviceBuffer device(total);
  ASSERT_NE(device.get(), nullptr);
  ASSERT_CUDA(
      cudaMemcpy(device.get(), want.data(), total, cudaMemcpyHostToDevice));
  HostBuffer staging(total);
  std::vector<std::unique_ptr<CopyRecord>> records;
  auto source = Make({});
  ASSERT_NE(source, nullptr);
  ASSERT_TRUE(source->RegisterStaging(staging.get(), staging.size()).ok());
  ASSERT_TRUE(source->Fence(nullptr).ok());
  size_t off = 0;
  for (size_t s : sizes) {
    records.push_back(std::make_unique<CopyRecord>());
    source->Copy(staging.get() + off, device.get() + off, s,
                 records.back()->Captured(), records.back()->OnHost());
    off += s;
  }
  WaitAllOk(records);
  EXPECT_EQ(Compare(staging.get(), want.data(), total), "");
  const CudaSnapshotStats stats = source->stats();
  EXPECT_EQ(stats.device_ring_bytes, 0u);
  EXPECT_EQ(stats.chunks_direct, sizes.size());
  EXPECT_EQ(stats.bytes_direct, total);
  source->UnregisterStaging(staging.get());
}

TEST_F(CudaSnapshotTest, ZeroLengthCopyCompletes) {
  char byte = 7;
  CopyRecord record;
  auto source = Make({});
  ASSERT_NE(source, nullptr);
  source->Copy(&byte, nullptr, 0, record.Captured(), record.OnHost());
  EXPECT_TRUE(record.WaitCaptured().ok());
  EXPECT_TRUE(record.WaitHost().ok());
  EXPECT_TRUE(record.RanOnceInOrder());
  EXPECT_EQ(byte, 7);
}

TEST_F(CudaSnapshotTest, PageableStagingIsCopiedToo) {
  const size_t len = 3 * kMiB + 17;
  const std::vector<char> want = Pattern(len, 2);
  DeviceBuffer device(len);
  ASSERT_NE(device.get(), nullptr);
  ASSERT_CUDA(
      cudaMemcpy(device.get(), want.data(), len, cudaMemcpyHostToDevice));
  std::vector<char> staging(len, 0);  // never registered
  std::vector<std::unique_ptr<CopyRecord>> records;
  auto source = Make({});
  ASSERT_NE(source, nullptr);
  ASSERT_TRUE(source->Fence(nullptr).ok());
  CopyAll(*source, staging.data(), device.get(), len, kMiB, records);
  WaitAllOk(records);
  EXPECT_EQ(Compare(staging.data(), want.data(), len), "");
}

TEST_F(CudaSnapshotTest, DeviceSnapshotIsBitExactAndFallsBackWhenFull) {
  // 64 MiB in 4 MiB chunks through a 16 MiB ring, then one 24 MiB chunk
  // that can never fit it; twice, so the ring is reused.
  const size_t len = 88 * kMiB;
  const std::vector<char> want = Pattern(len, 3);
  DeviceBuffer device(len);
  ASSERT_NE(device.get(), nullptr);
  ASSERT_CUDA(
      cudaMemcpy(device.get(), want.data(), len, cudaMemcpyHostToDevice));
  HostBuffer staging(len);
  std::vector<std::unique_ptr<CopyRecord>> round_records[2];
  // Declared after what its copies use, so it is destroyed (and waits for
  // them) first, also when an assertion returns early.
  CudaSnapshotOptions options;
  options.device_snapshot = true;
  options.device_staging_bytes = 16 * kMiB;
  auto source = Make(options);
  ASSERT_NE(source, nullptr);
  ASSERT_EQ(source->stats().device_ring_bytes, 16 * kMiB);
  ASSERT_TRUE(source->RegisterStaging(staging.get(), staging.size()).ok());
  for (int round = 0; round < 2; ++round) {
    std::memset(staging.get(), 0, len);
    ASSERT_TRUE(source->Fence(nullptr).ok());
    std::vector<std::unique_ptr<CopyRecord>>& records = round_records[round];
    CopyAll(*source, staging.get(), device.get(), 64 * kMiB, 4 * kMiB, records);
    records.push_back(std::make_unique<CopyRecord>());
    source->Copy(staging.get() + 64 * kMiB, device.get() + 64 * kMiB, 24 * kMiB,
                 records.back()->Captured(), records.back()->OnHost());
    WaitAllOk(records);
    EXPECT_EQ(Compare(staging.get(), want.data(), len), "")
        << "round " << round;
  }
  const CudaSnapshotStats stats = source->stats();
  EXPECT_GE(stats.chunks_via_device, 2u);  // the first chunk of each round
  EXPECT_GE(stats.chunks_direct, 2u);      // the 24 MiB chunk of each round
  EXPECT_EQ(stats.chunks_via_device + stats.chunks_direct, 34u);
  EXPECT_EQ(stats.bytes_via_device + stats.bytes_direct, 2 * len);
}

TEST_F(CudaSnapshotTest, AutoSizedDeviceRing) {
  const size_t len = 8 * kMiB;
  const std::vector<char> want = Pattern(len, 4);
  DeviceBuffer device(len);
  ASSERT_NE(device.get(), nullptr);
  ASSERT_CUDA(
      cudaMemcpy(device.get(), want.data(), len, cudaMemcpyHostToDevice));
  HostBuffer staging(len);
  std::vector<std::unique_ptr<CopyRecord>> records;
  CudaSnapshotOptions options;
  options.device_snapshot = true;
  auto source = Make(options);
  ASSERT_NE(source, nullptr);
  const uint64_t ring = source->stats().device_ring_bytes;
  EXPECT_GT(ring, 0u);
  EXPECT_LE(ring, 4ull << 30);
  ASSERT_TRUE(source->RegisterStaging(staging.get(), staging.size()).ok());
  ASSERT_TRUE(source->Fence(nullptr).ok());
  CopyAll(*source, staging.get(), device.get(), len, len, records);
  WaitAllOk(records);
  EXPECT_EQ(Compare(staging.get(), want.data(), len), "");
  EXPECT_EQ(source->stats().chunks_via_device, 1u);
}

TEST_F(CudaSnapshotTest, RingLargerThanFreeMemoryTurnsDeviceSnapshotOff) {
  CudaSnapshotOptions options;
  options.device_snapshot = true;
  options.device_staging_bytes = 1ull << 60;
  const size_t len = kMiB;
  const std::vector<char> want = Pattern(len, 5);
  DeviceBuffer device(len);
  ASSERT_NE(device.get(), nullptr);
  ASSERT_CUDA(
      cudaMemcpy(device.get(), want.data(), len, cudaMemcpyHostToDevice));
  HostBuffer staging(len);
  std::vector<std::unique_ptr<CopyRecord>> records;
  auto source = Make(options);
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->stats().device_ring_bytes, 0u);
  ASSERT_TRUE(source->Fence(nullptr).ok());
  CopyAll(*source, staging.get(), device.get(), len, len, records);
  WaitAllOk(records);
  EXPECT_EQ(Compare(staging.get(), want.data(), len), "");
  EXPECT_EQ(source->stats().chunks_direct, 1u);
}

// The snapshot sees the caller's work queued before Fence() (held back by a
// gate until after the copies were enqueued), and not work queued after
// `captured`, even though that work runs before the bytes reach the host
// when the snapshot goes through device memory.
class CudaFenceTest : public CudaSnapshotTest {
 protected:
  void Run(cudaStream_t stream, void* fence_arg, bool device_snapshot) {
    const size_t len = 32 * kMiB;
    DeviceBuffer device(len);
    ASSERT_NE(device.get(), nullptr);
    ASSERT_CUDA(cudaMemset(device.get(), 0, len));
    ASSERT_CUDA(cudaDeviceSynchronize());  // test set-up only
    HostBuffer staging(len);
    std::vector<std::unique_ptr<CopyRecord>> records;
    CudaSnapshotOptions options;
    options.device_snapshot = device_snapshot;
    options.device_staging_bytes = 64 * kMiB;
    auto source = Make(options);
    ASSERT_NE(source, nullptr);
    ASSERT_TRUE(source->RegisterStaging(staging.get(), staging.size()).ok());

    // Destroyed before the source: opens and drains the stream first.
    StreamGate gate(stream);
    ASSERT_CUDA(gate.Close());
    ASSERT_CUDA(cudaMemsetAsync(device.get(), 0x11, len, stream));
    ASSERT_TRUE(source->Fence(fence_arg).ok());
    CopyAll(*source, staging.get(), device.get(), len, 4 * kMiB, records);
    gate.Open();
    for (auto& r : records) ASSERT_TRUE(r->WaitCaptured().ok());
    // Captured: the training loop may write again.
    ASSERT_CUDA(cudaMemsetAsync(device.get(), 0x22, len, stream));
    WaitAllOk(records);
    EXPECT_FALSE(gate.timed_out());
    EXPECT_EQ(Compare(staging.get(), std::vector<char>(len, 0x11).data(), len),
              "");
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    std::vector<char> now(len);
    ASSERT_CUDA(
        cudaMemcpy(now.data(), device.get(), len, cudaMemcpyDeviceToHost));
    EXPECT_EQ(Compare(now.data(), std::vector<char>(len, 0x22).data(), len),
              "");
    if (device_snapshot) {
      EXPECT_GT(source->stats().chunks_via_device, 0u);
    }
  }
};

TEST_F(CudaFenceTest, UserStream) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Run(stream, stream, /*device_snapshot=*/false);
}

TEST_F(CudaFenceTest, UserStreamDeviceSnapshot) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Run(stream, stream, /*device_snapshot=*/true);
}

TEST_F(CudaFenceTest, NullptrMeansTheLegacyDefaultStream) {
  Run(cudaStreamLegacy, nullptr, /*device_snapshot=*/false);
}

TEST_F(CudaFenceTest, NullptrMeansTheLegacyDefaultStreamDeviceSnapshot) {
  Run(cudaStreamLegacy, nullptr, /*device_snapshot=*/true);
}

TEST_F(CudaSnapshotTest, SavesFromTwoThreadsAtOnce) {
  const size_t len = 16 * kMiB;
  const std::vector<char> want = Pattern(2 * len, 6);
  DeviceBuffer device(2 * len);
  ASSERT_NE(device.get(), nullptr);
  ASSERT_CUDA(
      cudaMemcpy(device.get(), want.data(), 2 * len, cudaMemcpyHostToDevice));
  HostBuffer staging(2 * len);
  std::vector<std::unique_ptr<CopyRecord>> records[2];
  CudaSnapshotOptions options;
  options.device_snapshot = true;
  options.device_staging_bytes = 8 * kMiB;
  auto source = Make(options);
  ASSERT_NE(source, nullptr);
  ASSERT_TRUE(source->RegisterStaging(staging.get(), staging.size()).ok());
  std::vector<std::thread> savers;
  for (int t = 0; t < 2; ++t) {
    savers.emplace_back([&, t] {
      cudaStream_t stream = nullptr;
      if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
          cudaSuccess) {
        ADD_FAILURE() << "cudaStreamCreateWithFlags";
        return;
      }
      EXPECT_TRUE(source->Fence(stream).ok());
      CopyAll(*source, staging.get() + t * len, device.get() + t * len, len,
              kMiB, records[t]);
      (void)cudaStreamDestroy(stream);
    });
  }
  for (auto& t : savers) t.join();
  for (auto& r : records) WaitAllOk(r);
  EXPECT_EQ(Compare(staging.get(), want.data(), 2 * len), "");
}

TEST_F(CudaSnapshotTest, DestructionRunsEveryCallbackFirst) {
  const size_t len = 16 * kMiB;
  const std::vector<char> want = Pattern(len, 7);
  DeviceBuffer device(len);
  ASSERT_NE(device.get(), nullptr);
  ASSERT_CUDA(
      cudaMemcpy(device.get(), want.data(), len, cudaMemcpyHostToDevice));
  HostBuffer staging(len);
  std::vector<std::unique_ptr<CopyRecord>> records;
  {
    CudaSnapshotOptions options;
    options.device_snapshot = true;
    options.device_staging_bytes = 4 * kMiB;
    auto source = Make(options);
    ASSERT_NE(source, nullptr);
    // Left registered on purpose: the destructor unregisters it.
    ASSERT_TRUE(source->RegisterStaging(staging.get(), staging.size()).ok());
    ASSERT_TRUE(source->Fence(nullptr).ok());
    CopyAll(*source, staging.get(), device.get(), len, kMiB, records);
  }
  for (auto& r : records) EXPECT_TRUE(r->RanOnceInOrder());
  WaitAllOk(records);
  EXPECT_EQ(Compare(staging.get(), want.data(), len), "");
}

TEST_F(CudaSnapshotTest, RegisterStaging) {
  HostBuffer staging(1 << 20);
  auto source = Make({});
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->RegisterStaging(nullptr, 4096).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(source->RegisterStaging(staging.get(), staging.size()).ok());
  // Registered already: fine, and still usable.
  EXPECT_TRUE(source->RegisterStaging(staging.get(), staging.size()).ok());
  source->UnregisterStaging(staging.get());
  source->UnregisterStaging(staging.get());  // no longer ours: a no-op
}

TEST_F(CudaSnapshotTest, DeviceOutOfRangeIsInvalidArgument) {
  CudaSnapshotOptions options;
  options.device = 1 << 20;
  EXPECT_EQ(NewCudaSnapshotSource(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.device = -1;
  EXPECT_EQ(NewCudaSnapshotSource(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Last: a faulting copy may leave the process's CUDA context unusable
// (ctest runs every test in a process of its own).
TEST_F(CudaSnapshotTest, BadSourcePointerFailsBothCallbacks) {
  HostBuffer staging(4096);
  CopyRecord record;
  auto source = Make({});
  ASSERT_NE(source, nullptr);
  ASSERT_TRUE(source->RegisterStaging(staging.get(), staging.size()).ok());
  ASSERT_TRUE(source->Fence(nullptr).ok());
  source->Copy(staging.get(), reinterpret_cast<const char*>(uintptr_t{16}),
               4096, record.Captured(), record.OnHost());
  const Status captured = record.WaitCaptured();
  const Status on_host = record.WaitHost();
  EXPECT_FALSE(captured.ok());
  EXPECT_NE(captured.code(), absl::StatusCode::kDeadlineExceeded) << captured;
  EXPECT_TRUE(captured.code() == absl::StatusCode::kInternal ||
              captured.code() == absl::StatusCode::kUnavailable)
      << captured;
  EXPECT_NE(std::string(captured.message()).find("cudaError"),
            std::string::npos)
      << captured;
  EXPECT_EQ(on_host, captured);
  EXPECT_TRUE(record.RanOnceInOrder());
}

#endif  // STAGGER_HAVE_CUDA

}  // namespace
}  // namespace stagger::client
