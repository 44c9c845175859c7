#include "server/storage/testing/test_util.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "format/crc32c.h"

namespace stagger::storage_internal {

TempDir::TempDir(const std::string& parent) {
  std::string base = parent;
  if (base.empty()) {
    const char* env = std::getenv("TEST_TMPDIR");
    base = env != nullptr && *env != '\0' ? env : "/tmp";
  }
  std::string tmpl = base + "/stagger_storage_XXXXXX";
  if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

TestRecord MakeRecord(std::mt19937_64& rng, size_t size) {
  TestRecord r;
  r.payload.resize(size);
  for (size_t i = 0; i < size; i += 8) {
    uint64_t v = rng();
    for (size_t k = 0; k < 8 && i + k < size; ++k) {
      r.payload[i + k] = static_cast<char>(v >> (8 * k));
    }
  }
  r.header.codec = format::Codec::kRaw;
  r.header.chunk_id = format::ChunkId::Of(r.payload.data(), r.payload.size());
  r.header.raw_length = size;
  r.header.encoded_length = size;
  r.header.payload_crc32c = format::Crc32c(r.payload.data(), r.payload.size());
  return r;
}

server::AppendCallback Collector::Callback(size_t i) {
  return [this, i](Result<server::ChunkLocation> r) {
    absl::MutexLock l(&mu_);
    results_[i] = std::move(r);
    ++done_;
  };
}

void Collector::WaitFor(size_t n) {
  absl::MutexLock l(&mu_);
  auto enough = [this, n]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= n; };
  mu_.Await(absl::Condition(&enough));
}

Result<server::ChunkLocation> AppendSync(server::SegmentStore* store,
                                         const std::string& job,
                                         const TestRecord& r,
                                         server::RecordLifetime lifetime) {
  Collector c(1);
  store->Append(job, r.header, r.Payload(), c.Callback(0),
                server::AppendOptions{.lifetime = lifetime});
  c.Wait();
  return c.result(0);
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  if (f == nullptr) return;
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  int c = std::fgetc(f);
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  std::fputc((c ^ 0x5a) & 0xff, f);
  std::fclose(f);
}

}  // namespace stagger::storage_internal
