#include "format/names.h"

#include <gtest/gtest.h>

#include "format/manifest.h"

namespace stagger::format {
namespace {

TEST(NamesTest, ValidateName) {
  EXPECT_TRUE(ValidateName("job", "llama-7b_run.3").ok());
  EXPECT_TRUE(ValidateName("job", std::string(128, 'a')).ok());
  for (std::string bad :
       {std::string(), std::string(129, 'a'), std::string("a/b"),
        std::string("a b"), std::string("..\n"), std::string("x\0y", 3),
        std::string("."), std::string("..")}) {
    Status s = ValidateName("job", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("invalid job name"), std::string::npos);
  }
}

TEST(NamesTest, TensorBytes) {
  EXPECT_EQ(*TensorBytes("F32", {2, 3}), 24u);
  EXPECT_EQ(*TensorBytes("BF16", {}), 2u);
  EXPECT_EQ(*TensorBytes("U8", {0, 5}), 0u);
  EXPECT_EQ(TensorBytes("F33", {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorBytes("F32", {-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorBytes("F64", {1ll << 40, 1ll << 40}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NamesTest, DtypesFromOneTable) {
  EXPECT_EQ(*DtypeSize("BF16"), 2u);
  EXPECT_EQ(*DtypeSize("U64"), 8u);
  EXPECT_EQ(*DtypeSize("BOOL"), 1u);
  auto bad = DtypeSize("F8");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(
                "'F8' (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 "
                "BOOL)"),
            std::string::npos)
      << bad.status();
  EXPECT_EQ(FloatElementSize("F64"), 8);
  EXPECT_EQ(FloatElementSize("BF16"), 2);
  EXPECT_EQ(FloatElementSize("F16"), 2);
  EXPECT_EQ(FloatElementSize("F32"), 4);
  EXPECT_EQ(FloatElementSize("I32"), 0);
  EXPECT_EQ(FloatElementSize("BOOL"), 0);
  EXPECT_EQ(FloatElementSize("F8"), 0);
}

TEST(NamesTest, ValidateSlice) {
  EXPECT_TRUE(ValidateSlice({2, 4}, {8, 4}, {6, 0}).ok());
  EXPECT_TRUE(ValidateSlice({2, 4}, {}, {}).ok());
  EXPECT_FALSE(ValidateSlice({2, 4}, {8, 4}, {7, 0}).ok());
  EXPECT_FALSE(ValidateSlice({2, 4}, {8}, {0}).ok());
}

pb::ShardManifest GoodManifest() {
  pb::ShardManifest m;
  m.set_job("j");
  m.set_step(3);
  m.set_rank(1);
  m.set_world_size(2);
  m.set_chunk_size(4096);
  pb::TensorEntry* t = m.add_tensors();
  t->set_name("w");
  t->set_dtype("F32");
  t->add_shape(2048);
  t->set_byte_size(8192);
  for (int i = 0; i < 2; ++i) {
    pb::ChunkRef* c = t->add_chunks();
    c->set_id(std::string(16, static_cast<char>(i)));
    c->set_raw_length(4096);
    c->set_stored_length(4096);
  }
  return m;
}

TEST(ManifestTest, AcceptsAGoodManifest) {
  EXPECT_TRUE(ValidateShardManifest(GoodManifest()).ok());
}

TEST(ManifestTest, RejectsEachBadField) {
  auto expect_bad = [](pb::ShardManifest m, std::string_view needle) {
    Status s = ValidateShardManifest(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(AsAbsl(needle)), std::string::npos)
        << s.message();
  };
  pb::ShardManifest m = GoodManifest();
  m.set_rank(2);
  expect_bad(m, "rank 2");
  m = GoodManifest();
  m.set_world_size(0);
  expect_bad(m, "world size 0");
  m = GoodManifest();
  m.set_job("bad/job");
  expect_bad(m, "invalid job name");
  m = GoodManifest();
  m.mutable_tensors(0)->set_byte_size(100);
  expect_bad(m, "byte_size 100");
  m = GoodManifest();
  m.mutable_tensors(0)->mutable_chunks(1)->set_raw_length(10);
  expect_bad(m, "chunks cover");
  m = GoodManifest();
  *m.add_tensors() = m.tensors(0);
  expect_bad(m, "appears twice");
  m = GoodManifest();
  m.mutable_tensors(0)->mutable_chunks(0)->set_id("short");
  expect_bad(m, "16 bytes");
  m = GoodManifest();
  m.set_step(-1);
  expect_bad(m, "step");
}

TEST(ManifestTest, MissingRanksNamesWhoHasNotCommitted) {
  pb::StepInfo step;
  step.set_world_size(4);
  for (uint32_t r : {0u, 2u}) step.add_committed_ranks(r);
  EXPECT_EQ(MissingRanks(step), "ranks 1, 3");
  step.add_committed_ranks(3);
  EXPECT_EQ(MissingRanks(step), "rank 1");
  step.add_committed_ranks(1);
  EXPECT_EQ(MissingRanks(step), "");
  pb::StepInfo big;
  big.set_world_size(100);
  big.add_committed_ranks(0);
  EXPECT_EQ(MissingRanks(big, 3), "ranks 1, 2, 3 and 96 more");
}

}  // namespace
}  // namespace stagger::format
