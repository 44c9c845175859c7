#include "server/testing/indexed_stores.h"

#include <gtest/gtest.h>

#include "format/codec.h"
#include "format/crc32c.h"

namespace stagger::server_internal {

void IndexedStores::Open() {
  ASSERT_TRUE(dir_.ok());
  auto meta = server::MetaStore::Open(dir_.path() + "/meta");
  ASSERT_TRUE(meta.ok()) << meta.status();
  meta_ = std::move(*meta);
  server::SegmentStoreOptions so;
  so.dir = dir_.path() + "/segments";
  so.preallocate_bytes = 0;
  auto segments = server::SegmentStore::Open(so);
  ASSERT_TRUE(segments.ok()) << segments.status();
  segments_ = std::move(*segments);
}

void IndexedStores::Close() {
  segments_.reset();
  meta_.reset();
}

format::ChunkId IndexedStores::Put(const std::string& job, std::string_view raw,
                                   format::Codec codec, std::string_view base,
                                   server::RecordLifetime lifetime) {
  const format::ChunkId id = format::ChunkId::Of(raw.data(), raw.size());
  format::EncodeOptions eo;
  storage_internal::TestRecord r;
  server::ChunkMeta m;
  Result<format::Codec> used = format::Codec::kRaw;
  if (format::IsDelta(codec)) {
    m.base = format::ChunkId::Of(base.data(), base.size());
    used = format::EncodeDeltaWith(codec, raw, base, *m.base, &r.payload, eo);
  } else {
    used = format::Encode(codec, raw, &r.payload, eo);
  }
  EXPECT_TRUE(used.ok() && *used == codec) << used.status();
  r.header.codec = codec;
  r.header.chunk_id = id;
  r.header.raw_length = raw.size();
  r.header.encoded_length = r.payload.size();
  r.header.payload_crc32c = format::Crc32c(r.payload.data(), r.payload.size());
  auto loc = storage_internal::AppendSync(segments_.get(), job, r, lifetime);
  EXPECT_TRUE(loc.ok()) << loc.status();
  m.location = *loc;
  m.raw_length = raw.size();
  m.stored_length = r.payload.size();
  m.codec = codec;
  EXPECT_TRUE(meta_->PutChunk(job, id, m).ok());
  return id;
}

}  // namespace stagger::server_internal
