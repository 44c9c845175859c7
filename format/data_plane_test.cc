#include "format/data_plane.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

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
  EXPECT_FALSE(d->in_memory);
}

TEST(DataPlaneTest, PutChunkCarriesTheMemoryFlagAndRefusesUnknownOnes) {
  PutChunkRequest r;
  r.job = "j";
  r.record.chunk_id = ChunkId{1, 2};
  r.in_memory = true;
  std::string enc = EncodePutChunk(r);
  auto d = DecodePutChunk(enc);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->in_memory);
  EXPECT_EQ(d->record.chunk_id, (ChunkId{1, 2}));
  enc.back() = 3;
  EXPECT_EQ(DecodePutChunk(enc).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePutChunk(enc + "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DataPlaneTest, PutChunkCarriesThePreviousVersion) {
  PutChunkRequest r;
  r.job = "j";
  r.record.chunk_id = ChunkId{1, 2};
  r.previous = ChunkId{5, 6};
  r.element_size = 4;
  for (bool memory : {false, true}) {
    r.in_memory = memory;
    const std::string enc = EncodePutChunk(r);
    auto d = DecodePutChunk(enc);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->in_memory, memory);
    ASSERT_TRUE(d->previous.has_value());
    EXPECT_EQ(*d->previous, (ChunkId{5, 6}));
    EXPECT_EQ(d->element_size, 4);
    // Short or long by a byte, or a width that is not one: refused.
    EXPECT_EQ(DecodePutChunk(enc.substr(0, enc.size() - 1)).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(DecodePutChunk(enc + "x").status().code(),
              absl::StatusCode::kInvalidArgument);
    std::string odd = enc;
    odd.back() = 3;
    EXPECT_EQ(DecodePutChunk(odd).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
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
  EXPECT_EQ(d->size_hint, 0u);
  // With a size hint: 8 bytes more, and every truncation of those too.
  enc = EncodeGetChunk({"j", ChunkId{3, 4}, (4u << 20) + 64});
  d = DecodeGetChunk(enc);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->id, (ChunkId{3, 4}));
  EXPECT_EQ(d->size_hint, (4u << 20) + 64);
  for (size_t n = enc.size() - 7; n < enc.size(); ++n) {
    EXPECT_EQ(DecodeGetChunk(enc.substr(0, n)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(DecodeGetChunk(enc + "x").status().code(),
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

TEST(DataPlaneTest, GetRangeRoundTripAndMalformed) {
  GetRangeRequest r{"j", ChunkId{3, 4}, {{4096, 1000}, {8192, 24}}};
  const std::string header = EncodeGetRange(r);
  auto d = DecodeGetRange(header);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->job, "j");
  EXPECT_EQ(d->id, (ChunkId{3, 4}));
  EXPECT_EQ(d->parts, r.parts);
  for (size_t n = 0; n < header.size(); ++n) {
    EXPECT_EQ(DecodeGetRange(header.substr(0, n)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(DecodeGetRange(header + "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  // No part, an empty part, one too long, one ending past any chunk (or
  // wrapping), parts adding up to more than a chunk.
  for (const std::vector<ChunkPart>& parts :
       std::vector<std::vector<ChunkPart>>{{},
                                           {{0, 0}},
                                           {{0, kMaxChunkRawBytes + 1}},
                                           {{kMaxChunkRawBytes, 1}},
                                           {{~0ull, 2}},
                                           {{0, kMaxChunkRawBytes}, {0, 1}}}) {
    EXPECT_EQ(DecodeGetRange(EncodeGetRange({"j", ChunkId{3, 4}, parts}))
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << parts.size() << " parts";
  }
  std::vector<ChunkPart> many(kMaxRangeParts + 1, ChunkPart{0, 1});
  EXPECT_EQ(DecodeGetRange(EncodeGetRange({"j", ChunkId{3, 4}, many}))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      DecodeGetRange(
          EncodeGetRange({"j", ChunkId{3, 4}, {{0, kMaxChunkRawBytes}}}))
          .ok());
  // The most parts, with the longest job name, fit a transport header.
  std::vector<ChunkPart> most(kMaxRangeParts, ChunkPart{0, 1});
  EXPECT_LE(EncodeGetRange({std::string(255, 'j'), ChunkId{3, 4}, most}).size(),
            8192u);
}

TEST(DataPlaneTest, RangeReplyCarriesStatusOrCrc) {
  auto ok = DecodeRangeReply(EncodeRangeReply(absl::OkStatus(), 0xdeadbeef));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->status.ok());
  EXPECT_EQ(ok->crc32c, 0xdeadbeefu);
  auto e = DecodeRangeReply(EncodeRangeReply(absl::NotFoundError("gone")));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(e->status.message(), "gone");
  // An OK reply without its CRC, or an error with bytes after it.
  std::string good = EncodeRangeReply(absl::OkStatus(), 7);
  EXPECT_FALSE(DecodeRangeReply(good.substr(0, good.size() - 1)).ok());
  EXPECT_FALSE(
      DecodeRangeReply(EncodeRangeReply(absl::NotFoundError("x")) + "abcd")
          .ok());
}

}  // namespace
}  // namespace stagger::format
