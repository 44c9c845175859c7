#include "transport/internal/same_host.h"

#include <string>

#include "gtest/gtest.h"

namespace stagger::transport_internal {
namespace {

TEST(SameHostTest, KeyNamesBootUserAndNamespaces) {
  const std::string key = SameHostKey();
  ASSERT_FALSE(key.empty()) << "/proc is not readable here";
  for (const char* part : {"boot=", " uid=", " ipc=", " pid=", " mnt="}) {
    EXPECT_NE(key.find(part), std::string::npos) << part << " in " << key;
  }
  EXPECT_EQ(SameHostKey(), key);  // stable within a process
}

TEST(SameHostTest, OfferRoundTrips) {
  ShmOffer offer;
  offer.host_key = "boot=abc uid=0";
  offer.token = 0x0102030405060708ull;
  offer.worker_address = std::string("\0\1\2addr", 7);
  auto back = DecodeShmOffer(EncodeShmOffer(offer));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->host_key, offer.host_key);
  EXPECT_EQ(back->token, offer.token);
  EXPECT_EQ(back->worker_address, offer.worker_address);
  auto token = DecodeShmToken(EncodeShmToken(offer.token));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, offer.token);
}

TEST(SameHostTest, BadOffersAreNamed) {
  EXPECT_EQ(DecodeShmOffer("").status().code(), absl::StatusCode::kNotFound);
  ShmOffer offer;
  offer.host_key = "k";
  offer.token = 7;
  offer.worker_address = "address";
  const std::string good = EncodeShmOffer(offer);
  struct Case {
    std::string header;
    std::string says;
  };
  for (const Case& c :
       {Case{"XXXX" + good.substr(4), "magic"},
        Case{good.substr(0, 5), "host key"}, Case{good.substr(0, 10), "token"},
        Case{good + "x", "worker address length"},
        Case{good.substr(0, good.size() - 1), "worker address length"}}) {
    auto r = DecodeShmOffer(c.header);
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << c.says;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << r.status();
  }
  auto token = DecodeShmToken("1234567");
  ASSERT_FALSE(token.ok());
  EXPECT_NE(token.status().message().find("7 bytes"), std::string::npos);
}

}  // namespace
}  // namespace stagger::transport_internal
