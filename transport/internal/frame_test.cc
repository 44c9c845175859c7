#include "transport/internal/frame.h"

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "transport/transport.h"

namespace stagger::transport_internal {
namespace {

std::string Encoded(const Frame& f) {
  std::string out(kFrameBytes, '\0');
  EncodeFrame(f, out.data());
  return out;
}

TEST(FrameTest, RoundTripsWithHeaderInline) {
  Frame f;
  f.kind = FrameKind::kReply;
  f.op = 0xBEEF;
  f.header_len = 5;
  f.request_id = 0x0123456789ABCDEFull;
  f.payload_len = 1 << 20;
  std::string am = Encoded(f) + "hello";
  Result<Frame> g = ParseFrame(am.data(), am.size(), 1 << 20);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->kind, FrameKind::kReply);
  EXPECT_EQ(g->flags, 0);
  EXPECT_EQ(g->op, 0xBEEF);
  EXPECT_EQ(g->header_len, 5u);
  EXPECT_EQ(g->request_id, 0x0123456789ABCDEFull);
  EXPECT_EQ(g->payload_len, 1u << 20);
  EXPECT_FALSE(g->header_in_data());
}

TEST(FrameTest, RoundTripsWithHeaderInData) {
  Frame f;
  f.kind = FrameKind::kRequest;
  f.flags = kFrameHeaderInData;
  f.header_len = 8000;
  f.payload_len = 10;
  std::string am = Encoded(f);
  Result<Frame> g = ParseFrame(am.data(), am.size(), 8010);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->header_in_data());
  EXPECT_EQ(g->header_len, 8000u);
}

TEST(FrameTest, IsLittleEndianOnTheWire) {
  Frame f;
  f.kind = FrameKind::kHello;
  f.op = 0x0102;
  std::string am = Encoded(f);
  EXPECT_EQ(am.substr(0, 4), "STG1");
  EXPECT_EQ(am[4], 4);
  EXPECT_EQ(am[6], 0x02);
  EXPECT_EQ(am[7], 0x01);
}

void ExpectDataLoss(const std::string& am, size_t data_len,
                    const std::string& what) {
  Result<Frame> r = ParseFrame(am.data(), am.size(), data_len);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << what;
}

TEST(FrameTest, RejectsMalformedFrames) {
  Frame good;
  good.kind = FrameKind::kRequest;
  good.header_len = 3;
  good.payload_len = 4;
  const std::string ok = Encoded(good) + "abc";
  ASSERT_TRUE(ParseFrame(ok.data(), ok.size(), 4).ok());

  EXPECT_EQ(ParseFrame(nullptr, 0, 0).status().code(),
            absl::StatusCode::kDataLoss);
  ExpectDataLoss(ok.substr(0, kFrameBytes - 1), 0, "short");
  std::string bad_magic = ok;
  bad_magic[0] = 'X';
  ExpectDataLoss(bad_magic, 4, "magic");
  // 6 and 7 are retired kinds.
  for (char kind : {char{0}, char{6}, char{7}, char{9}, char{-1}}) {
    std::string k = ok;
    k[4] = kind;
    ExpectDataLoss(k, 4, "kind");
  }
  std::string flags = ok;
  flags[5] = 0x2;
  ExpectDataLoss(flags, 4, "flags");
  ExpectDataLoss(ok + "d", 4, "AM header longer than the frame says");
  ExpectDataLoss(ok.substr(0, ok.size() - 1), 4, "AM header shorter");
  ExpectDataLoss(ok, 5, "data longer");
  ExpectDataLoss(ok, 3, "data shorter");

  Frame huge = good;
  huge.header_len = transport::kMaxHeaderBytes + 1;
  ExpectDataLoss(Encoded(huge), 0, "header_len over the limit");
  huge = good;
  huge.header_len = 0;
  huge.payload_len = transport::kMaxPayloadBytes + 1;
  ExpectDataLoss(Encoded(huge), transport::kMaxPayloadBytes + 1,
                 "payload_len over the limit");
  huge.payload_len = ~uint64_t{0};
  ExpectDataLoss(Encoded(huge), ~size_t{0}, "payload_len that would wrap");
}

TEST(FrameTest, RandomBytesNeverParseInconsistently) {
  std::mt19937 rng(42);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string am(rng() % 64, '\0');
    for (char& c : am) c = static_cast<char>(rng());
    if (i % 2 == 0 && am.size() >= 4) am.replace(0, 4, "STG1");
    size_t data_len = rng() % 128;
    Result<Frame> r = ParseFrame(am.data(), am.size(), data_len);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
      continue;
    }
    ++accepted;
    // Anything accepted describes exactly the bytes that arrived.
    size_t in_am = r->header_in_data() ? 0 : r->header_len;
    size_t in_data = r->header_in_data() ? r->header_len : 0;
    EXPECT_EQ(am.size(), kFrameBytes + in_am);
    EXPECT_EQ(data_len, r->payload_len + in_data);
  }
  EXPECT_LT(accepted, 20000);
}

TEST(HelloTest, RoundTripsAndRefusesMalformedHeaders) {
  const std::string address(300, '\x7f');
  auto h = DecodeHello(EncodeHello({address, "host pid 1"}));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->worker_address, address);
  EXPECT_EQ(h->rest, "host pid 1");
  std::string no_rest = EncodeHello({"a", ""});
  ASSERT_TRUE(DecodeHello(no_rest).ok());
  for (const std::string& bad :
       {std::string(), std::string("\x01\x00\x00"),
        std::string("\x00\x00\x00\x00rest", 8),  // no address
        std::string("\x05\x00\x00\x00"
                    "abc",
                    7),  // announces more
        std::string("\x01\x40\x00\x00", 4) + std::string(16385, 'x')}) {
    EXPECT_EQ(DecodeHello(bad).status().code(), absl::StatusCode::kDataLoss)
        << bad.size();
  }
}

}  // namespace
}  // namespace stagger::transport_internal
