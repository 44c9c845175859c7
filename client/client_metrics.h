// The client's metrics page (Prometheus text format, stagger_client_*),
// served at CheckpointerOptions::metrics_listen.
#ifndef STAGGER_CLIENT_CLIENT_METRICS_H_
#define STAGGER_CLIENT_CLIENT_METRICS_H_

#include <cstdint>
#include <string>

#include "stagger/checkpointer.h"

namespace stagger::client {

// Every sample is labelled with the job and the rank.
std::string RenderClientMetrics(const ClientMetrics& m, const std::string& job,
                                uint32_t rank);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CLIENT_METRICS_H_
