#include "format/record.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <string>

#include "format/chunk_id.h"
#include "format/crc32c.h"
#include "format/internal/xxh3_avx2.h"
#include "util/build_info.h"

namespace stagger::format {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::string MakeRecord(const std::string& payload, Codec codec,
                       uint64_t raw_length) {
  RecordHeader h;
  h.codec = codec;
  h.chunk_id = ChunkId::Of(payload.data(), payload.size());
  h.raw_length = raw_length;
  std::string rec(RecordSize(payload.size()), '\x55');
  EncodeRecord(h, payload, rec.data());
  return rec;
}

TEST(Crc32cTest, KnownVectors) {
  // RFC 3720 B.4 test vectors.
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  // Extending in pieces equals one pass.
  std::string data = RandomBytes(1000, 7);
  uint32_t a = Crc32cExtend(Crc32c(data.data(), 333), data.data() + 333, 667);
  EXPECT_EQ(a, Crc32c(data.data(), data.size()));
}

TEST(Crc32cTest, FastPathMatchesTableForEveryLengthAndOffset) {
  std::string data = RandomBytes((3 << 20) + 123, 11);
  // Lengths around the three-stream block sizes (3 x 256, 3 x 8192).
  for (size_t len :
       {0ul, 1ul, 7ul, 8ul, 767ul, 768ul, 769ul, 24575ul, 24576ul, 24577ul,
        100000ul, 4194304ul - 1 - (1 << 20) - 123, data.size() - 5}) {
    for (size_t off : {0ul, 1ul, 5ul}) {
      if (off + len > data.size()) continue;
      EXPECT_EQ(Crc32c(data.data() + off, len),
                Crc32cExtendPortable(0, data.data() + off, len))
          << "len " << len << " off " << off;
    }
  }
  EXPECT_EQ(Crc32cExtend(0x12345678, data.data(), 50000),
            Crc32cExtendPortable(0x12345678, data.data(), 50000));
}

TEST(ChunkIdTest, HexAndBytesRoundTrip) {
  std::string data = RandomBytes(4096, 1);
  ChunkId id = ChunkId::Of(data.data(), data.size());
  EXPECT_EQ(*ChunkId::FromHex(id.ToHex()), id);
  EXPECT_EQ(*ChunkId::FromBytes(id.ToBytes()), id);
  EXPECT_EQ(id.ToHex().size(), 32u);
  EXPECT_EQ(ChunkId::FromHex("xyz").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkId::FromBytes("short").status().code(),
            absl::StatusCode::kInvalidArgument);
  data[0] ^= 1;
  EXPECT_NE(ChunkId::Of(data.data(), data.size()), id);
}

TEST(ChunkIdTest, OnePassGivesTheHashAndTheCrcOfTheSameBytes) {
  // Lengths around the one-pass block (64 KiB), and a 4 MiB chunk.
  std::string data = RandomBytes(4 << 20, 7);
  for (size_t n : {0ul, 1ul, 65535ul, 65536ul, 65537ul, 200000ul, 4ul << 20}) {
    uint32_t crc = 0xdeadbeef;
    ChunkId id = ChunkId::Of(data.data(), n, &crc);
    EXPECT_EQ(id, ChunkId::Of(data.data(), n)) << "len " << n;
    EXPECT_EQ(crc, Crc32c(data.data(), n)) << "len " << n;
  }
}

TEST(ChunkIdTest, TheAvx2BuildHashesAsTheLibraryDoes) {
  if (!internal::Xxh3Avx2Usable()) {
    GTEST_SKIP() << "this CPU (or build) has no AVX2: ChunkId uses the "
                    "library's XXH3 only";
  }
  // XXH3's length classes (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer),
  // its 64-byte stripes and 1 KiB blocks, and a 4 MiB chunk plus a tail.
  const std::string data = RandomBytes((4 << 20) + 13, 11);
  for (size_t n :
       {0ul, 1ul, 3ul, 4ul, 8ul, 9ul, 16ul, 17ul, 128ul, 129ul, 240ul, 241ul,
        1023ul, 1024ul, 1025ul, 65536ul, 65537ul, (4ul << 20) + 13}) {
    XXH128_hash_t want = XXH3_128bits(data.data(), n);
    uint64_t hi = 0, lo = 0;
    internal::Xxh3Avx2(data.data(), n, &hi, &lo);
    EXPECT_EQ(hi, want.high64) << "len " << n;
    EXPECT_EQ(lo, want.low64) << "len " << n;
    for (size_t block : {1000ul, 65536ul}) {
      uint32_t crc = 0xdeadbeef;
      hi = lo = 0;
      internal::Xxh3Avx2WithCrc32c(data.data(), n, block, &hi, &lo, &crc);
      EXPECT_EQ(hi, want.high64) << "len " << n << " block " << block;
      EXPECT_EQ(lo, want.low64) << "len " << n << " block " << block;
      EXPECT_EQ(crc, Crc32c(data.data(), n)) << "len " << n;
    }
  }
}

TEST(RecordTest, RoundTripAndAlignment) {
  for (size_t n : {0ul, 1ul, 4031ul, 4032ul, 4033ul, 100000ul}) {
    std::string payload = RandomBytes(n, static_cast<uint32_t>(n));
    std::string rec = MakeRecord(payload, Codec::kRaw, n);
    EXPECT_EQ(rec.size() % kRecordAlignment, 0u);
    auto h = VerifyRecord(rec);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->encoded_length, n);
    EXPECT_EQ(h->raw_length, n);
    EXPECT_EQ(h->codec, Codec::kRaw);
    EXPECT_EQ(h->chunk_id, ChunkId::Of(payload.data(), payload.size()));
    EXPECT_EQ(rec.substr(kRecordHeaderSize, n), payload);
  }
}

TEST(RecordTest, EveryCorruptedByteIsDetected) {
  std::string payload = RandomBytes(5000, 3);  // record spans 2 blocks
  const std::string rec = MakeRecord(payload, Codec::kRaw, payload.size());
  ASSERT_EQ(rec.size(), 8192u);
  for (size_t i = 0; i < rec.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80}) {
      std::string bad = rec;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      auto h = VerifyRecord(bad);
      ASSERT_FALSE(h.ok()) << "byte " << i << " flip " << int(flip);
      EXPECT_EQ(h.status().code(), absl::StatusCode::kDataLoss);
    }
  }
}

// Without the payload check, a flipped payload byte passes (the caller
// hashes the payload itself); the header and the padding are still checked.
TEST(RecordTest, PayloadCheckCanBeLeftToTheCaller) {
  std::string payload = RandomBytes(5000, 5);
  const std::string rec = MakeRecord(payload, Codec::kRaw, payload.size());
  for (size_t i = 0; i < rec.size(); ++i) {
    std::string bad = rec;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    const bool in_payload =
        i >= kRecordHeaderSize && i < kRecordHeaderSize + payload.size();
    EXPECT_EQ(VerifyRecord(bad, /*check_payload=*/false).ok(), in_payload)
        << "byte " << i;
  }
}

TEST(RecordTest, TruncatedRecordsAreRejected) {
  std::string payload = RandomBytes(6000, 4);
  const std::string rec = MakeRecord(payload, Codec::kRaw, payload.size());
  for (size_t len : {0ul, 10ul, 63ul, 64ul, 4096ul, rec.size() - 1}) {
    auto h = VerifyRecord(std::string_view(rec).substr(0, len));
    ASSERT_FALSE(h.ok()) << len;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(RecordTest, HeaderBoundsAreChecked) {
  std::string payload = "abc";
  RecordHeader h;
  h.codec = Codec::kRaw;
  h.raw_length = kMaxChunkRawBytes + 1;
  h.encoded_length = 3;
  char buf[kRecordHeaderSize];
  EncodeRecordHeader(h, buf);
  auto r = DecodeRecordHeader(std::string_view(buf, sizeof buf));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("raw length"), std::string::npos);
}

TEST(RecordTest, VerifyPayloadNamesTheChunk) {
  std::string payload = RandomBytes(100, 9);
  RecordHeader h;
  h.chunk_id = ChunkId::Of(payload.data(), payload.size());
  h.raw_length = h.encoded_length = payload.size();
  h.payload_crc32c = Crc32c(payload.data(), payload.size());
  EXPECT_TRUE(VerifyPayload(h, payload).ok());
  payload[50] ^= 4;
  Status s = VerifyPayload(h, payload);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(h.chunk_id.ToHex()), std::string::npos);
}

}  // namespace
}  // namespace stagger::format

namespace stagger::format {
namespace {

// util/build_info.cc repeats the format version (util sits below format/).
TEST(RecordTest, BuildInfoNamesThisFormatVersion) {
  EXPECT_NE(
      BuildInfo("x").find("(format " + std::to_string(kFormatVersion) + ")"),
      std::string::npos)
      << BuildInfo("x");
}

}  // namespace
}  // namespace stagger::format
