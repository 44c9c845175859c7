// The server's metrics page (Prometheus text format), served at /metrics
// when stagger-server runs with --metrics-listen. Every family is named
// stagger_server_*; docs/operations.md says what each one means.
#ifndef STAGGER_SERVER_METRICS_PAGE_H_
#define STAGGER_SERVER_METRICS_PAGE_H_

#include <string>

#include "server/control_calls.h"
#include "server/control_service.h"
#include "server/data_service.h"
#include "server/ingest_admission.h"
#include "server/promoter.h"
#include "server/rebaser.h"
#include "server/storage/segment_store.h"
#include "server/tier/drainer.h"

namespace stagger::server {

// What the page is drawn from; none owned, any may be nullptr (its
// families are then left out).
struct MetricsSources {
  const DataService* data = nullptr;
  const ControlService* control = nullptr;
  const ControlCalls* control_calls = nullptr;
  const SegmentStore* segments = nullptr;
  const IngestAdmission* admission = nullptr;
  const Rebaser* rebaser = nullptr;
  const tier::Drainer* drainer = nullptr;  // with a cold store
  const MemoryTier* memory = nullptr;      // with --memory-bytes
  const Promoter* promoter = nullptr;
  std::string data_dir;  // statvfs'd for disk space; empty: left out
};

std::string RenderServerMetrics(const MetricsSources& s);

}  // namespace stagger::server

#endif  // STAGGER_SERVER_METRICS_PAGE_H_
