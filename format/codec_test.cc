#include "format/codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace stagger::format {
namespace {

TEST(CodecTest, ZstdRoundTripCompressibleData) {
  std::string raw(1 << 20, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i % 17);
  std::string enc;
  auto codec = Encode(Codec::kZstd, raw, &enc);
  ASSERT_TRUE(codec.ok());
  EXPECT_EQ(*codec, Codec::kZstd);
  EXPECT_LT(enc.size(), raw.size() / 10);
  std::string out(raw.size(), '\x01');
  ASSERT_TRUE(Decode(Codec::kZstd, enc, out.data(), out.size()).ok());
  EXPECT_EQ(out, raw);
}

TEST(CodecTest, IncompressibleDataFallsBackToRaw) {
  std::mt19937 rng(5);
  std::string raw(65536, '\0');
  for (auto& c : raw) c = static_cast<char>(rng());
  std::string enc;
  auto codec = Encode(Codec::kZstd, raw, &enc);
  ASSERT_TRUE(codec.ok());
  EXPECT_EQ(*codec, Codec::kRaw);
  EXPECT_EQ(enc, raw);
}

// Float-like data: small values around zero, as weights are.
std::string Floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::string s(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    float f = d(rng);
    std::memcpy(&s[i * 4], &f, 4);
  }
  return s;
}

TEST(CodecTest, ByteGroupingRoundTripsEveryWidthAndTail) {
  std::string base = Floats(50000, 9);
  for (int w : {2, 4, 8}) {
    for (size_t len :
         {base.size(), base.size() - 1, base.size() - 3, 8ul, 7ul}) {
      std::string raw = base.substr(0, len);
      std::string enc;
      EncodeOptions o;
      o.element_size = w;
      auto codec = Encode(Codec::kByteGroupZstd, raw, &enc, o);
      ASSERT_TRUE(codec.ok()) << codec.status();
      std::string out(raw.size(), '\x7f');
      ASSERT_TRUE(Decode(*codec, enc, out.data(), out.size()).ok());
      EXPECT_EQ(out, raw) << "w " << w << " len " << len;
    }
  }
}

TEST(CodecTest, ByteGroupingCompressesFloatsBetterThanZstd) {
  std::string raw = Floats(1 << 18, 3);  // 1 MiB of fp32
  std::string plain, grouped;
  ASSERT_EQ(*Encode(Codec::kZstd, raw, &plain), Codec::kZstd);
  EncodeOptions o;
  o.element_size = 4;
  ASSERT_EQ(*Encode(Codec::kByteGroupZstd, raw, &grouped, o),
            Codec::kByteGroupZstd);
  EXPECT_LT(grouped.size(), plain.size());
  EXPECT_EQ(grouped[0], 4);
}

TEST(CodecTest, ByteGroupingRejectsBadWidths) {
  std::string enc;
  EncodeOptions o;
  o.element_size = 3;
  EXPECT_EQ(Encode(Codec::kByteGroupZstd, "abcdef", &enc, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string out(8, '\0');
  EXPECT_EQ(Decode(Codec::kByteGroupZstd, std::string("\x03xyz"), out.data(),
                   out.size())
                .code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Decode(Codec::kByteGroupZstd, "", out.data(), out.size()).code(),
            absl::StatusCode::kDataLoss);
}

TEST(CodecTest, XorDeltaRoundTripsAndBeatsFullEncoding) {
  std::string base = Floats(1 << 18, 21);
  std::string next = base;
  // A small update to every weight: low mantissa bits change.
  for (size_t i = 0; i < next.size(); i += 4) next[i] ^= 0x15;
  ChunkId base_id = ChunkId::Of(base.data(), base.size());
  for (int w : {1, 2, 4, 8}) {
    EncodeOptions o;
    o.element_size = w;
    std::string delta;
    auto codec = EncodeDelta(next, base, base_id, &delta, o);
    ASSERT_TRUE(codec.ok()) << codec.status();
    ASSERT_EQ(*codec, Codec::kXorByteGroupZstd) << w;
    EXPECT_EQ(*DeltaBase(delta), base_id);
    std::string out(next.size(), '\0');
    ASSERT_TRUE(DecodeDelta(delta, base, out.data(), out.size()).ok());
    EXPECT_EQ(out, next);
    // Plain Decode cannot do it alone.
    EXPECT_EQ(Decode(*codec, delta, out.data(), out.size()).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  EncodeOptions o4;
  o4.element_size = 4;
  std::string full, delta;
  ASSERT_TRUE(Encode(Codec::kByteGroupZstd, next, &full, o4).ok());
  ASSERT_TRUE(EncodeDelta(next, base, base_id, &delta, o4).ok());
  EXPECT_LT(delta.size() * 3, full.size());
  // Wrong base bytes or lengths are caught.
  std::string out(next.size(), '\0');
  EXPECT_EQ(DecodeDelta(delta, base.substr(1), out.data(), out.size()).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      DecodeDelta(delta.substr(0, 10), base, out.data(), out.size()).code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      EncodeDelta(next, base.substr(4), base_id, &delta, o4).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(CodecTest, XorDeltaRoundTripsEveryWidthAtOddLengths) {
  // Lengths whose element counts are not multiples of the word-at-a-time
  // loops (4 elements of 2 bytes, 2 of 4), with and without a byte tail.
  for (size_t len : {1, 7, 8, 9, 15, 17, 4099, 65543}) {
    std::string base = Floats(len / 4 + 1, 3).substr(0, len);
    std::string next = base;
    for (size_t i = 0; i < next.size(); i += 3) next[i] ^= 0x5a;
    const ChunkId base_id = ChunkId::Of(base.data(), base.size());
    for (int w : {1, 2, 4, 8}) {
      EncodeOptions o;
      o.element_size = w;
      std::string delta;
      auto codec = EncodeDelta(next, base, base_id, &delta, o);
      ASSERT_TRUE(codec.ok()) << codec.status();
      std::string out(next.size(), '\0');
      if (*codec == Codec::kRaw) {
        EXPECT_EQ(delta, next) << len << " " << w;
        continue;
      }
      ASSERT_TRUE(DecodeDelta(delta, base, out.data(), out.size()).ok());
      EXPECT_EQ(out, next) << len << " " << w;
    }
  }
}

TEST(CodecTest, DecodeRejectsWrongLengthsAndGarbage) {
  std::string raw(4096, 'a');
  std::string enc;
  ASSERT_EQ(*Encode(Codec::kZstd, raw, &enc), Codec::kZstd);
  std::string out(4095, '\0');
  EXPECT_EQ(Decode(Codec::kZstd, enc, out.data(), out.size()).code(),
            absl::StatusCode::kDataLoss);
  std::string garbage = "not a zstd frame at all";
  std::string out2(4096, '\0');
  EXPECT_EQ(Decode(Codec::kZstd, garbage, out2.data(), out2.size()).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Decode(Codec::kRaw, "abc", out2.data(), 4).code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace stagger::format
