// Which UCX transports an endpoint uses, read from ucp_ep_print_info (UCX
// 1.13 has no query for it): the lane that carries active messages and the
// lanes that carry rendezvous payloads. What a connection reports as its
// transport::DataPath, so that a user can check which path bytes take.
#ifndef STAGGER_TRANSPORT_INTERNAL_UCX_LANES_H_
#define STAGGER_TRANSPORT_INTERNAL_UCX_LANES_H_

#include <ucp/api/ucp.h>

#include <string>
#include <string_view>

#include "transport/transport.h"

namespace stagger::transport_internal {

// Parses the text ucp_ep_print_info writes. Lanes are named "tl/device"
// ("tcp/lo", "cma/memory"). Payloads travel on the rma_bw lanes when there
// are any (rendezvous by get or put), else on the am_bw lane (rendezvous
// pipelined through active messages). Unknown text gives empty fields.
transport::DataPath ParseEndpointInfo(std::string_view text);

// The same for a live endpoint. Progress thread only.
transport::DataPath DescribeEndpoint(ucp_ep_h ep);

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_UCX_LANES_H_
