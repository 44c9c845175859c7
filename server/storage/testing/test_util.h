// Helpers for the storage tests: temp dirs, random records, and waiting for
// append callbacks without sleeping.
#ifndef STAGGER_SERVER_STORAGE_TESTING_TEST_UTIL_H_
#define STAGGER_SERVER_STORAGE_TESTING_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "format/record.h"
#include "server/storage/segment_store.h"
#include "transport/buffer.h"

namespace stagger::storage_internal {

// A fresh directory under $TEST_TMPDIR (or /tmp, or `parent`), removed with
// everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& parent = "");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  bool ok() const { return !path_.empty(); }

 private:
  std::string path_;
};

struct TestRecord {
  format::RecordHeader header;
  std::string payload;
  transport::Buffer Payload() const {
    return transport::Buffer::CopyOf(payload);
  }
};

// A raw-codec record of `size` random bytes.
TestRecord MakeRecord(std::mt19937_64& rng, size_t size);

// Collects the results of `n` append callbacks; Wait() blocks until all
// `n` have run. Callbacks may run in any order.
class Collector {
 public:
  explicit Collector(size_t n) : results_(n, absl::UnknownError("pending")) {}
  server::AppendCallback Callback(size_t i);
  void Wait() { WaitFor(results_.size()); }
  // Blocks until `n` callbacks have run.
  void WaitFor(size_t n);
  const Result<server::ChunkLocation>& result(size_t i) const {
    return results_[i];
  }
  size_t size() const { return results_.size(); }

 private:
  absl::Mutex mu_;
  size_t done_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Result<server::ChunkLocation>> results_;
};

// Appends one record and waits for its callback.
Result<server::ChunkLocation> AppendSync(
    server::SegmentStore* store, const std::string& job, const TestRecord& r,
    server::RecordLifetime lifetime = server::RecordLifetime::kLong);

// Reads a whole file / overwrites one byte of it, with plain stdio.
std::string ReadFileBytes(const std::string& path);
void FlipByte(const std::string& path, uint64_t offset);

}  // namespace stagger::storage_internal

#endif  // STAGGER_SERVER_STORAGE_TESTING_TEST_UTIL_H_
