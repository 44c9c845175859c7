#include "transport/internal/ucx_lanes.h"

#include <gtest/gtest.h>

namespace stagger::transport_internal {
namespace {

// As UCX 1.13.1 prints a same-host endpoint under UCX_TLS=sm,tcp with cma
// on, and one with tcp alone.
constexpr char kCma[] = R"(#
# UCP endpoint
#
#               peer: <no debug data>
#                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup
#                 lane[1]:  4:cma/memory.0 md[3]            -> md[3]/cma/sysdev[255] rma_bw#0
#
#                 am_send: 0..<egr/short>..8185..<egr/zcopy>..8192..<rndv>..(inf)
#
#                  rma_bw: mds rndv_rkey_size 9
#
)";
constexpr char kTcp[] = R"(#
#                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup
#                 am_send: 0..<egr/short>..8185..<egr/zcopy>..20553..<rndv>..(inf)
#                  rma_bw: mds rndv_rkey_size 9
)";

TEST(UcxLanesTest, CmaCarriesPayloadsAndTcpMessages) {
  transport::DataPath p = ParseEndpointInfo(kCma);
  EXPECT_EQ(p.messages, "tcp/lo");
  EXPECT_EQ(p.payloads, "cma/memory");
  EXPECT_TRUE(p.cross_memory());
  EXPECT_EQ(p.ToString(), "payloads by cma/memory, messages by tcp/lo");
}

TEST(UcxLanesTest, WithoutRmaLanesPayloadsTakeTheActiveMessageLane) {
  transport::DataPath p = ParseEndpointInfo(kTcp);
  EXPECT_EQ(p.messages, "tcp/lo");
  EXPECT_EQ(p.payloads, "tcp/lo");
  EXPECT_FALSE(p.cross_memory());
}

TEST(UcxLanesTest, SeveralBandwidthLanesAreAllNamed) {
  transport::DataPath p = ParseEndpointInfo(
      "lane[0]:  1:rc_mlx5/mlx5_0:1.0 md[1] -> md[1]/ib/sysdev[0] am am_bw#0 "
      "rma_bw#0 wireup\n"
      "lane[1]:  2:rc_mlx5/mlx5_1:1.0 md[2] -> md[2]/ib/sysdev[1] am_bw#1 "
      "rma_bw#1\n");
  EXPECT_EQ(p.messages, "rc_mlx5/mlx5_0:1");
  EXPECT_EQ(p.payloads, "rc_mlx5/mlx5_0:1,rc_mlx5/mlx5_1:1");
}

TEST(UcxLanesTest, TextWithoutLanesGivesNothing) {
  for (const char* text : {"", "lane[", "lane[0]: nothing", "#\n# peer\n",
                           "lane[0]:  0:tcp md[0] -> md[0] am"}) {
    transport::DataPath p = ParseEndpointInfo(text);
    EXPECT_EQ(p.messages, "") << text;
    EXPECT_EQ(p.payloads, "") << text;
  }
}

}  // namespace
}  // namespace stagger::transport_internal
