#include "format/codec.h"

#include <gtest/gtest.h>

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
