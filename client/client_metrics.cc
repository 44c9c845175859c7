#include "client/client_metrics.h"

#include "metrics/process.h"
#include "metrics/text_format.h"
#include "util/build_info.h"

namespace stagger::client {

std::string RenderClientMetrics(const ClientMetrics& m, const std::string& job,
                                uint32_t rank) {
  const metrics::Labels l = {{"job", job}, {"rank", std::to_string(rank)}};
  metrics::TextWriter w;
  metrics::WriteStandardFamilies(w, "client", Version(), FormatVersion());
  w.Counter("stagger_client_saves_total",
            "Saves finished (committed or failed).", m.saves, l);
  w.Counter("stagger_client_saves_failed_total", "Saves that failed.",
            m.saves_failed, l);
  w.Counter("stagger_client_stall_seconds_total",
            "Training time blocked in Save() and BeforeUpdate().", m.stall_s,
            l);
  w.Gauge("stagger_client_last_stall_seconds",
          "Blocked time of the last Save() (with its BeforeUpdate()).",
          m.last_stall_s, l);
  w.Gauge("stagger_client_callers_waiting",
          "Calls blocked now in Save, WaitForRoom or WaitAll for saves in "
          "flight.",
          m.callers_waiting, l);
  w.Counter("stagger_client_snapshot_seconds_total",
            "Save() call to every tensor captured, summed over finished saves.",
            m.snapshot_s, l);
  w.Counter("stagger_client_durable_seconds_total",
            "Save() call to commit acknowledged, summed over finished saves.",
            m.durable_s, l);
  w.Gauge("stagger_client_last_durable_seconds",
          "Save() call to commit of the last finished save.", m.last_durable_s,
          l);
  w.Counter("stagger_client_raw_bytes_total", "State bytes saved (raw).",
            m.bytes_raw, l);
  w.Counter("stagger_client_shipped_bytes_total",
            "Payload bytes sent to servers (after deltas and encoding).",
            m.bytes_shipped, l);
  w.Counter("stagger_client_chunks_total", "Chunks saved.", m.chunks, l);
  w.Counter("stagger_client_chunks_unchanged_total",
            "Chunks unchanged since the previous save (sent as references).",
            m.chunks_unchanged, l);
  w.Counter("stagger_client_yield_seconds_total",
            "QoS: time checkpoint traffic was held back for collectives.",
            m.yield_s, l);
  w.Counter("stagger_client_saves_late_total",
            "Saves that became durable after their deadline.", m.saves_late, l);
  w.Counter("stagger_client_late_seconds_total",
            "How long after their deadlines late saves became durable.",
            m.late_s, l);
  w.Counter("stagger_client_loads_total", "Load() calls that succeeded.",
            m.loads, l);
  w.Counter("stagger_client_loads_failed_total", "Load() calls that failed.",
            m.loads_failed, l);
  w.Counter("stagger_client_loaded_bytes_total",
            "Registered bytes filled by successful loads.", m.bytes_loaded, l);
  w.Counter("stagger_client_load_manifest_bytes_total",
            "Bytes of manifests read to plan loads.", m.load_manifest_bytes, l);
  w.Gauge("stagger_client_last_load_plan_seconds",
          "The last load's time from its call to its plan.", m.last_load_plan_s,
          l);
  w.Gauge("stagger_client_staging_pool_bytes",
          "The default staging pool's size (0: none yet).",
          m.staging_pool_bytes, l);
  w.Counter("stagger_client_staging_prefaulted_bytes_total",
            "Staging bytes faulted in ahead of the saves, in the background.",
            m.staging_prefaulted_bytes, l);
  w.Gauge("stagger_client_servers_down",
          "Servers of the set marked down (their copies went to the next "
          "server of each ranking).",
          m.servers_down, l);
  w.Gauge("stagger_client_servers_cross_memory",
          "Servers whose data connection moves payloads by cross-memory "
          "attach (same host) rather than over the network.",
          m.servers_cross_memory, l);
  w.Gauge("stagger_client_gate_learned",
          "QoS: 1 while the collective gate holds a model of the iteration.",
          m.gate_learned ? 1 : 0, l);
  w.Gauge("stagger_client_gate_period_seconds",
          "QoS: the learned iteration period (0 without a model).",
          m.gate_period_s, l);
  w.Counter("stagger_client_gate_models_learned_total",
            "QoS: iteration models the collective gate adopted.",
            m.gate_models_learned, l);
  w.Counter("stagger_client_gate_models_dropped_total",
            "QoS: models dropped because the iterations stopped matching.",
            m.gate_models_dropped, l);
  return w.text();
}

}  // namespace stagger::client
