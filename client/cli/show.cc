// stagger show: what a person wants to know after a save, per rank, from
// the statistics each rank's client stored with its manifest.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/session.h"
#include "client/control.h"
#include "util/json.h"

namespace stagger::client {
namespace {

// "raw:12 zstd:3", sorted by name.
std::string Counts(const google::protobuf::Map<std::string, uint64_t>& m) {
  std::vector<std::string> parts;
  for (const auto& [name, n] :
       std::map<std::string, uint64_t>(m.begin(), m.end())) {
    parts.push_back(absl::StrCat(name, ":", n));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

// {"raw":12,"zstd":3}, sorted by name.
std::string JsonCounts(const google::protobuf::Map<std::string, uint64_t>& m) {
  std::vector<std::string> parts;
  for (const auto& [name, n] :
       std::map<std::string, uint64_t>(m.begin(), m.end())) {
    parts.push_back(absl::StrCat(JsonQuote(name), ":", n));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

// The servers meant to hold the chunks of `shard`: the first `replicas`
// of each chunk's ranking (placement: ServerSet; a copy that failed over
// during the save sits further down its ranking).
std::vector<std::string> ServersOf(ServerSet& servers,
                                   const pb::ShardManifest& shard) {
  std::set<std::string> used;
  const size_t copies = std::max<uint32_t>(1, shard.replicas());
  for (const pb::TensorEntry& t : shard.tensors()) {
    for (int i = 0; i < t.chunks_size(); ++i) {
      std::vector<ServerConn*> ranked =
          servers.ForSlot(shard.rank(), t.name(), i, shard.node());
      for (size_t k = 0; k < copies && k < ranked.size(); ++k) {
        used.insert(ranked[k]->address);
      }
    }
  }
  return {used.begin(), used.end()};
}

double Ratio(const pb::ShardStats& st) {
  return st.bytes_shipped() > 0
             ? static_cast<double>(st.bytes_raw()) / st.bytes_shipped()
             : 0;
}

}  // namespace

int RunShow(const ShowArgs& a) {
  auto step = ParseStep(a.step);
  if (!step.ok()) return Usage("show", step.status().message());
  auto session = OpenSession(a.server);
  if (!session.ok()) return Fail("show", session.status());
  auto reply = GetStep(*session->servers, a.job, *step, true, {});
  if (!reply.ok()) return Fail("show", reply.status());
  const pb::StepInfo& info = reply->step();
  if (a.json) {
    std::vector<std::string> ranks;
    for (const pb::ShardManifest& m : reply->shards()) {
      const pb::ShardStats& st = m.stats();
      std::vector<std::string> servers;
      for (const std::string& s : ServersOf(*session->servers, m)) {
        servers.push_back(JsonQuote(s));
      }
      ranks.push_back(absl::StrCat(
          "{\"rank\":", m.rank(), ",\"stall_s\":", st.stall_s(),
          ",\"snapshot_s\":", st.snapshot_s(),
          ",\"durable_s\":", st.durable_s(), ",\"bytes_raw\":", st.bytes_raw(),
          ",\"bytes_shipped\":", st.bytes_shipped(), ",\"ratio\":", Ratio(st),
          ",\"chunks\":", st.chunks(),
          ",\"chunks_unchanged\":", st.chunks_unchanged(),
          ",\"codec_chunks\":", JsonCounts(st.codec_chunks()),
          ",\"codec_reasons\":", JsonCounts(st.codec_reasons()),
          ",\"chunks_no_base\":", st.chunks_no_base(), ",\"yield_s\":",
          st.yield_s(), ",\"paced_rate_Bps\":", st.paced_bytes_per_s(),
          ",\"servers\":[", absl::StrJoin(servers, ","), "]}"));
    }
    printf(
        "{\"job\":%s,\"step\":%lld,\"state\":\"%s\",\"level\":\"%s\","
        "\"world_size\":%u,\"ranks\":[%s]}\n",
        JsonQuote(a.job).c_str(), static_cast<long long>(info.step()),
        info.complete() ? "complete" : "partial", Level(info),
        info.world_size(), absl::StrJoin(ranks, ",").c_str());
    return 0;
  }
  printf("job %s step %lld: %s (level %s), %d of %u ranks committed\n",
         a.job.c_str(), static_cast<long long>(info.step()),
         info.complete() ? "complete" : "partial", Level(info),
         info.committed_ranks_size(), info.world_size());
  printf("%-5s %9s %9s %9s %14s %14s %6s %11s %8s  %-24s %-34s %s\n", "RANK",
         "STALL_S", "SNAP_S", "DURABLE_S", "RAW_BYTES", "SHIPPED_BYTES",
         "RATIO", "UNCHANGED", "YIELD_S", "CODECS", "WHY (codec_reasons)",
         "SERVERS");
  for (const pb::ShardManifest& m : reply->shards()) {
    const pb::ShardStats& st = m.stats();
    printf(
        "%-5u %9.3f %9.3f %9.3f %14llu %14llu %6.2f %5llu/%-5llu %8.3f  "
        "%-24s %-34s %s\n",
        m.rank(), st.stall_s(), st.snapshot_s(), st.durable_s(),
        static_cast<unsigned long long>(st.bytes_raw()),
        static_cast<unsigned long long>(st.bytes_shipped()), Ratio(st),
        static_cast<unsigned long long>(st.chunks_unchanged()),
        static_cast<unsigned long long>(st.chunks()), st.yield_s(),
        Counts(st.codec_chunks()).c_str(), Counts(st.codec_reasons()).c_str(),
        absl::StrJoin(ServersOf(*session->servers, m), ",").c_str());
  }
  return 0;
}

}  // namespace stagger::client
