#include "format/data_plane.h"

#include <gtest/gtest.h>

namespace stagger::format {
namespace {

TEST(DataPlaneTest, PutChunkRoundTrip) {
  PutChunkRequest r;
  r.job = "job-1";
  r.record.codec = Codec::kZstd;
  r.record.chunk_id = ChunkId{1, 2};
  r.record.raw_length = 100;
  r.record.encoded_length = 50;
  r.record.payload_crc32c = 77;
  auto d = DecodePutChunk(EncodePutChunk(r));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->job, "job-1");
  EXPECT_EQ(d->record.chunk_id, (ChunkId{1, 2}));
  EXPECT_EQ(d->record.encoded_length, 50u);
  EXPECT_EQ(d->record.payload_crc32c, 77u);
}

TEST(DataPlaneTest, GetChunkRoundTripAndMalformed) {
  std::string enc = EncodeGetChunk({"j", ChunkId{3, 4}});
  auto d = DecodeGetChunk(enc);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->id, (ChunkId{3, 4}));
  // Every truncation and a job name with a slash are rejected.
  for (size_t n = 0; n < enc.size(); ++n) {
    EXPECT_EQ(DecodeGetChunk(enc.substr(0, n)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  std::string bad = enc;
  bad[1] = '/';
  EXPECT_EQ(DecodeGetChunk(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DataPlaneTest, ReplyCarriesStatusAndRecord) {
  auto e = DecodeReply(EncodeReply(absl::DataLossError("bad crc in seg 3")));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(e->status.message(), "bad crc in seg 3");
  EXPECT_FALSE(e->has_record);
  RecordHeader h;
  h.chunk_id = ChunkId{5, 6};
  h.raw_length = h.encoded_length = 9;
  auto ok = DecodeReply(EncodeReply(absl::OkStatus(), &h));
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->status.ok());
  ASSERT_TRUE(ok->has_record);
  EXPECT_EQ(ok->record.chunk_id, (ChunkId{5, 6}));
  EXPECT_EQ(DecodeReply("ab").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagger::format
