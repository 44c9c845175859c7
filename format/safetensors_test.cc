#include "format/safetensors.h"

#include <gtest/gtest.h>

namespace stagger::format {
namespace {

TEST(SafetensorsTest, HeaderLayout) {
  auto h = SafetensorsHeader({{"a", "F32", {2, 2}, 16}, {"b", "U8", {3}, 3}},
                             {{"step", "7"}});
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_GE(h->size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>((*h)[i]);
  EXPECT_EQ(n, h->size() - 8);
  EXPECT_EQ(n % 8, 0u);
  std::string json = h->substr(8);
  while (!json.empty() && json.back() == ' ') json.pop_back();
  EXPECT_EQ(json,
            "{\"__metadata__\":{\"step\":\"7\"},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
            "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]}}");
}

TEST(SafetensorsTest, RejectsMismatchedSizes) {
  auto h = SafetensorsHeader({{"a", "F32", {2, 2}, 15}}, {});
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  auto d = SafetensorsHeader({{"a", "F32", {1}, 4}, {"a", "F32", {1}, 4}}, {});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagger::format
