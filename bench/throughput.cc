// bench_throughput: how fast does a full checkpoint become durable end to
// end (client -> UCX -> server -> disk)?
//
// Measured in the same run, for the same byte count (--size of realistic
// state):
//   disk     sequential write ceiling of the data directory's disk: io_uring,
//            space reserved first, 4 MiB writes, queue depth 8, O_DIRECT
//            (buffered when refused), fdatasync at the end
//   link     UCX loopback: 4 MiB calls, 16 in flight, to a listener that
//            replies at once (UCX_TLS=sm,tcp unless set)
//   stagger  a stagger-server process (next to this binary) on a temporary
//            data directory; one client takes an optimizer step on the
//            state (as training does right before a checkpoint), saves it
//            as a fresh job and waits for durable. With codec=raw, codec=zstd
//            (every chunk encoded: may make 2 cores CPU bound) and codec=auto
//            (adaptive: encodes the share of chunks that keeps it at least as
//            fast as raw); --codecs picks which. auto_vs_raw = auto GB/s / raw
//            GB/s (target: >= 1: encoding never makes a save slower)
// Each of --iterations rounds measures disk, link and one save per codec;
// every figure is the median over the rounds.
// The server's metrics page, read before and after each save, tells what
// its segment writer did meanwhile: writer_GBps = bytes it wrote / seconds
// its writes took (the disk's speed during the save, beside the ceiling
// measured a little earlier), writer_busy = seconds of writes and
// fdatasyncs / the save's seconds (near 1: the disk was the bottleneck).
// RESULT ratio = raw-codec GB/s / min(disk, link). Target (docs/benchmarks.md):
// >= 0.85.
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/ceilings.h"
#include "bench/common.h"
#include "bench/server_process.h"
#include "client/checkpointer_impl.h"
#include "client/cli/synthetic_state.h"
#include "metrics/http_exporter.h"
#include "metrics/text_format.h"
#include "stagger/checkpointer.h"

namespace stagger::bench {
namespace {

struct CodecRun {
  std::string codec;
  std::vector<double> seconds;  // Save() call to Wait() returning
  std::vector<SaveStats> stats;
  std::vector<double> writer_gbps;  // see the file comment
  std::vector<double> writer_busy;
  double Median_s() const { return Median(seconds); }
  uint64_t raw() const { return stats.empty() ? 0 : stats.back().bytes_raw; }
  uint64_t shipped() const {
    return stats.empty() ? 0 : stats.back().bytes_shipped;
  }
  double GBps() const {
    double s = Median_s();
    return s > 0 ? raw() / s / 1e9 : 0;
  }
};

// The server's segment writer's totals so far, from its metrics page.
struct WriterTotals {
  double bytes = 0;
  double write_s = 0;
  double sync_s = 0;
};

Result<WriterTotals> ScrapeWriter(const std::string& metrics_address) {
  if (metrics_address.empty()) {
    return absl::FailedPreconditionError(
        "stagger-server announced no metrics address (it needs "
        "--metrics-listen)");
  }
  const std::string where = "server metrics at " + metrics_address;
  auto page = metrics::HttpGet(metrics_address, "/metrics");
  if (!page.ok()) return WithContext(page.status(), where);
  WriterTotals w;
  const std::pair<double*, const char*> samples[] = {
      {&w.bytes, "stagger_server_segment_bytes_written_total"},
      {&w.write_s, "stagger_server_write_seconds_sum"},
      {&w.sync_s, "stagger_server_fsync_seconds_sum"}};
  for (const auto& [field, name] : samples) {
    auto value = metrics::SampleValue(*page, name);
    if (!value.ok()) return WithContext(value.status(), where);
    *field = *value;
  }
  return w;
}

// Saves the state as step 1 of a new job (so every save is a full
// checkpoint, whatever the client keeps from earlier steps) and waits for
// it to be durable.
// `o` carries the flags' tuning (threads, chunks in flight, overlap).
Status SaveOnce(CheckpointerOptions o, const ServerProcess& server,
                const std::string& codec, int iteration,
                client::SyntheticState& state, CodecRun* run) {
  o.servers = server.grpc_address();
  o.job = "bench-throughput-" + codec + "-" + std::to_string(iteration);
  o.codec = *ParseCodecChoice(codec);  // checked with the flags
  // The staging pool is allocated (and its pages touched) once, at Open, as
  // a training job that saves every few minutes would; the timed save is
  // the steady state, not the first allocation. A slab per chunk: every
  // tensor's last chunk takes a whole slab, so a pool of total / chunk_size
  // slabs would run dry before the snapshot ends and start the drain early.
  o.staging_bytes = 0;
  for (const client::SyntheticTensor& t : state.tensors()) {
    o.staging_bytes +=
        (t.bytes.size() + o.chunk_size - 1) / o.chunk_size * o.chunk_size;
  }
  auto ck = Checkpointer::Open(o);
  if (!ck.ok()) return WithContext(ck.status(), "open " + o.job);
  STAGGER_RETURN_IF_ERROR(RegisterState(state, **ck));
  // Training saves right after an optimizer step has written the weights
  // and moments. The step also matters to the figure on a VM whose memory,
  // left untouched for a second or more, is read up to 2x slower on the
  // first pass: the ceilings that run in between would otherwise make the
  // snapshot read state no training loop leaves idle.
  state.Step();
  STAGGER_ASSIGN_OR_RETURN(WriterTotals before,
                           ScrapeWriter(server.metrics_address()));
  auto start = Clock::now();
  auto h = (*ck)->Save(1);
  if (!h.ok()) return WithContext(h.status(), "Save " + o.job);
  STAGGER_RETURN_IF_ERROR(WithContext(h->Wait(), "durable " + o.job));
  const double seconds = SecondsSince(start);
  // Every chunk was acknowledged, so the writer counted it already.
  STAGGER_ASSIGN_OR_RETURN(WriterTotals after,
                           ScrapeWriter(server.metrics_address()));
  run->seconds.push_back(seconds);
  run->stats.push_back(h->stats());
  const double write_s = after.write_s - before.write_s;
  run->writer_gbps.push_back(Div(after.bytes - before.bytes, write_s) / 1e9);
  run->writer_busy.push_back(
      Div(write_s + (after.sync_s - before.sync_s), seconds));
  return absl::OkStatus();
}

std::string GB(double gbps) { return Fixed(gbps, 3); }

int Main(int argc, char** argv) {
  Flags flags("bench_throughput",
              {{"size", {"2GiB", "bytes of model state"}},
               {"json", {"", "write the figures as JSON to this file"}},
               {"data",
                {"/tmp",
                 "parent of the temporary data directory "
                 "(its disk is the one measured)"}},
               {"iterations", {"3", "rounds of ceilings and saves (median)"}},
               {"server",
                {"",
                 "stagger-server binary (default: next to "
                 "this one, or $STAGGER_BIN_DIR)"}},
               {"pipeline-threads",
                {"0", "CheckpointerOptions.pipeline_threads (0: auto)"}},
               {"max-inflight",
                {std::to_string(CheckpointerOptions().max_inflight_chunks),
                 "CheckpointerOptions.max_inflight_chunks"}},
               {"snapshot-overlap",
                {std::string(NameOf(CheckpointerOptions().snapshot_overlap)),
                 "CheckpointerOptions.snapshot_overlap (auto, on, off)"}},
               {"codecs",
                {"raw,zstd,auto",
                 "codecs to save with, in order (raw first: the others are "
                 "compared with it)"}},
               {"seed", {"1", "SyntheticState seed"}}});
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail("throughput", s);
  if (flags.help()) {
    flags.PrintUsage();
    return 0;
  }
  auto size = flags.GetSize("size");
  auto iterations = flags.GetInt("iterations");
  auto seed = flags.GetInt("seed");
  if (!size.ok()) return Fail("throughput", size.status());
  if (!iterations.ok()) return Fail("throughput", iterations.status());
  if (!seed.ok()) return Fail("throughput", seed.status());
  CheckpointerOptions tuning;
  tuning.pipeline_threads = atoi(flags.Get("pipeline-threads").c_str());
  auto max_inflight_flag = flags.GetInt("max-inflight");
  if (!max_inflight_flag.ok()) {
    return Fail("throughput", max_inflight_flag.status());
  }
  tuning.max_inflight_chunks = static_cast<size_t>(*max_inflight_flag);
  auto overlap = ParseSnapshotOverlap(flags.Get("snapshot-overlap"));
  if (!overlap.ok()) {
    return Fail("throughput",
                WithContext(overlap.status(), "--snapshot-overlap"));
  }
  tuning.snapshot_overlap = *overlap;
  std::string server_bin = flags.Get("server");
  if (server_bin.empty()) server_bin = BinDir() + "/stagger-server";
  std::vector<CodecRun> runs;
  for (absl::string_view c : absl::StrSplit(flags.Get("codecs"), ',')) {
    if (auto parsed = ParseCodecChoice(std::string(c)); !parsed.ok()) {
      return Fail("throughput", WithContext(parsed.status(), "--codecs"));
    }
    runs.push_back({std::string(c), {}, {}});
  }
  if (runs.empty() || runs[0].codec != "raw") {
    return Fail("throughput", absl::InvalidArgumentError(
                                  "--codecs must start with raw (the ratio "
                                  "and every comparison are against it)"));
  }
  auto dir = TempDir::Make(flags.Get("data"), "stagger-bench-throughput");
  if (!dir.ok()) return Fail("throughput", dir.status());

  client::SyntheticState state(*size, static_cast<uint64_t>(*seed));
  const uint64_t total = state.total_bytes();
  printf(
      "bench_throughput: %s of realistic state in %zu tensors, data "
      "directory %s\n",
      FormatBytes(total).c_str(), state.tensors().size(),
      (*dir)->path().c_str());
  fflush(stdout);

  // Also sets UCX_TLS for this process and the server it starts.
  auto first_link = MeasureUcxLoopback(total);
  if (!first_link.ok()) return Fail("throughput", first_link.status());
  auto server = ServerProcess::Start(server_bin, (*dir)->path() + "/server", 30,
                                     {"--metrics-listen", "127.0.0.1:0"});
  if (!server.ok()) return Fail("throughput", server.status());
  // Ceilings and saves alternate, so that a disk or a host whose speed
  // drifts during the run weighs on both sides of the ratio alike.
  std::vector<DiskWriteResult> disks;
  std::vector<LinkResult> links = {*first_link};
  for (int i = 0; i < *iterations && s.ok(); ++i) {
    auto disk = MeasureDiskWrite((*dir)->path(), total);
    if (!disk.ok()) return Fail("throughput", disk.status());
    disks.push_back(*disk);
    if (i > 0) {
      auto link = MeasureUcxLoopback(total);
      if (!link.ok()) return Fail("throughput", link.status());
      links.push_back(*link);
    }
    for (CodecRun& run : runs) {
      s = SaveOnce(tuning, **server, run.codec, i, state, &run);
      if (!s.ok()) return Fail("throughput", s);
    }
  }
  if (!disks.front().direct) {
    printf(
        "note: the filesystem refused O_DIRECT; the disk ceiling is "
        "buffered writes + fdatasync\n");
  }
  if (!disks.front().preallocated) {
    printf(
        "note: the filesystem could not reserve the ceiling's file up front; "
        "its writes extended it (serialized on some filesystems)\n");
  }
  server->reset();

  // Medians by time; bytes are the same every time.
  auto median_of = [](auto results) {
    std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) {
      return a.seconds < b.seconds;
    });
    // With an even count, the faster middle one: a ceiling errs high.
    return results[(results.size() - 1) / 2];
  };
  const DiskWriteResult disk = median_of(disks);
  const LinkResult link = median_of(links);
  const double ceiling = std::min(disk.GBps(), link.GBps());
  const char* ucx_tls = getenv("UCX_TLS");
  printf(
      "UCX_TLS=%s; medians of %d runs each, ceilings and saves alternating; "
      "each save a fresh job; GB = 1e9 bytes\n",
      ucx_tls != nullptr ? ucx_tls : "", *iterations);
  Table table({"path", "seconds", "GB/s", "x_min_ceiling", "bytes", "shipped",
               "durable_s", "snapshot_s", "overlapped", "writer_GB/s",
               "writer_busy"});
  table.AddRow({disk.direct ? "disk write (io_uring O_DIRECT, 4MiB x8)"
                            : "disk write (io_uring buffered, 4MiB x8)",
                Fixed(disk.seconds, 4), GB(disk.GBps()),
                Fixed(disk.GBps() / ceiling, 2), FormatBytes(disk.bytes), "-",
                "-", "-", "-", "-", "-"});
  table.AddRow({"UCX loopback (4MiB x16)", Fixed(link.seconds, 4),
                GB(link.GBps()), Fixed(link.GBps() / ceiling, 2),
                FormatBytes(link.bytes), "-", "-", "-", "-", "-", "-"});
  for (const CodecRun& run : runs) {
    std::vector<double> durable, snapshot, overlapped;
    for (const SaveStats& st : run.stats) {
      durable.push_back(st.durable_s);
      snapshot.push_back(st.snapshot_s);
      overlapped.push_back(static_cast<double>(st.bytes_overlapped));
    }
    table.AddRow({"stagger codec=" + run.codec, Fixed(run.Median_s(), 4),
                  GB(run.GBps()), Fixed(run.GBps() / ceiling, 2),
                  FormatBytes(run.raw()), FormatBytes(run.shipped()),
                  Fixed(Median(durable), 4), Fixed(Median(snapshot), 4),
                  FormatBytes(static_cast<uint64_t>(Median(overlapped))),
                  GB(Median(run.writer_gbps)),
                  Fixed(Median(run.writer_busy), 2)});
  }
  table.Print();

  const double ratio = runs[0].GBps() / ceiling;
  ResultLine result("throughput");
  result.Add("disk_GBps", disk.GBps());
  result.Add("link_GBps", link.GBps());
  result.Add("stagger_GBps", runs[0].GBps());
  result.Add("writer_GBps", Median(runs[0].writer_gbps));
  result.Add("writer_busy", Median(runs[0].writer_busy));
  for (size_t i = 1; i < runs.size(); ++i) {
    const CodecRun& run = runs[i];
    if (run.codec == "zstd") {
      result.Add("stagger_zstd_GBps", run.GBps());
      result.Add("zstd_ratio", run.GBps() / ceiling);
    } else if (run.codec == "auto") {
      result.Add("stagger_auto_GBps", run.GBps());
      // >= 1: the adaptive codec did not make the save slower than raw.
      result.Add("auto_vs_raw", run.GBps() / runs[0].GBps());
    }
  }

  JsonReport json;
  json.Set("name", std::string("throughput"));
  json.Set("size_bytes", static_cast<double>(total));
  json.Set("iterations", *iterations);
  json.SetBool("disk_direct", disk.direct);
  json.SetBool("disk_preallocated", disk.preallocated);
  json.Set("ucx_tls", std::string(ucx_tls != nullptr ? ucx_tls : ""));
  for (const auto& [key, value] : result.figures()) json.Set(key, value);
  json.Set("ratio", ratio);
  for (const CodecRun& run : runs) {
    for (size_t i = 0; i < run.stats.size(); ++i) {
      const SaveStats& st = run.stats[i];
      json.AddRow({{"codec", run.codec},
                   {"seconds", Fixed(run.seconds[i], 6)},
                   {"durable_s", Fixed(st.durable_s, 6)},
                   {"stall_s", Fixed(st.stall_s, 6)},
                   {"snapshot_s", Fixed(st.snapshot_s, 6)},
                   {"bytes_overlapped", std::to_string(st.bytes_overlapped)},
                   {"bytes_raw", std::to_string(st.bytes_raw)},
                   {"bytes_shipped", std::to_string(st.bytes_shipped)},
                   {"chunks", std::to_string(st.chunks)},
                   {"writer_GBps", Fixed(run.writer_gbps[i], 6)},
                   {"writer_busy", Fixed(run.writer_busy[i], 6)}});
    }
  }
  s = json.Write(flags.Get("json"));
  if (!s.ok()) return Fail("throughput", s);
  result.Print(ratio);
  return 0;
}

}  // namespace
}  // namespace stagger::bench

int main(int argc, char** argv) { return stagger::bench::Main(argc, argv); }
