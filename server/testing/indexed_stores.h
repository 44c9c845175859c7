// For server tests: a MetaStore and a SegmentStore in a temporary
// directory, and chunks stored and indexed as the data service does.
#ifndef STAGGER_SERVER_TESTING_INDEXED_STORES_H_
#define STAGGER_SERVER_TESTING_INDEXED_STORES_H_

#include <memory>
#include <string>
#include <string_view>

#include "format/chunk_id.h"
#include "format/record.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"
#include "server/storage/testing/test_util.h"

namespace stagger::server_internal {

class IndexedStores {
 public:
  // Opens both stores; errors through gtest assertions (call under
  // ASSERT_NO_FATAL_FAILURE).
  void Open();
  // Closes them (segments first).
  void Close();

  // Stores `raw` encoded with `codec` (a delta of `base` when the codec is
  // one) in `job`, in segments of `lifetime`, and indexes it; returns its
  // id.
  format::ChunkId Put(
      const std::string& job, std::string_view raw, format::Codec codec,
      std::string_view base = {},
      server::RecordLifetime lifetime = server::RecordLifetime::kLong);

  server::MetaStore* meta() { return meta_.get(); }
  server::SegmentStore* segments() { return segments_.get(); }

 private:
  storage_internal::TempDir dir_;
  std::unique_ptr<server::MetaStore> meta_;
  std::unique_ptr<server::SegmentStore> segments_;
};

// The bytes of a float vector.
inline std::string_view BytesOf(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)};
}

}  // namespace stagger::server_internal

#endif  // STAGGER_SERVER_TESTING_INDEXED_STORES_H_
