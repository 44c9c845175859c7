// bench_incremental: how many bytes travel, and how many land on the
// server's disk, for steps 2..N after a full step 1?
//
// SyntheticState of --size bytes, saved per tensor class: one Checkpointer
// (its own job, registering only that class's tensors) per class, all on
// one stagger-server process on a temporary data directory, with default
// options unless told otherwise. Step 1 is a full save; then --interval-s
// of training (a sleep), Step() and a save for steps 2..--steps. The server's
// disk is measured as `du` would (allocated blocks of segments/<job>) with the
// server stopped, after step 1 and after the last step (DiskMeter: it is
// restarted on the same address, and the Checkpointers go on against it).
// Reported per class:
//   raw 2..N / disk 2..N  bytes_raw of steps 2..N / the job's disk growth
//   peak 2..N             the job's largest growth over step 1 at any time
//                         (sampled every 50 ms, the server running: before
//                         rebases and compaction settle)
//   client 2..N           bytes_shipped of steps 2..N (the client's stats)
//   last step             raw / shipped, unchanged / chunks, codec mix and
//                         the policy's reasons (SaveStats::codec_reasons)
//   changed               bytes that differ between the last two steps,
//                         compared byte by byte before and after Step(), and
//                         the bytes of the chunks holding them
//   enc MB/s              bytes_raw / durable_s (a rough encode figure)
// Dense classes are also saved with --compare (plain zstd by default, on
// full chunks: no deltas), so the table shows what deltas and byte grouping
// gain over compressing the raw bytes.
// --trace DIR replays a trace of real training (make_torch_trace.py) too,
// per tensor class, with the same disk measure.
// Also the server's write amplification: bytes it wrote to storage over
// steps 2..N and their settling (/proc/PID/io) per raw byte saved.
// RESULT ratio = bf16_disk_ratio. Targets (issue 21 and docs/benchmarks.md):
// bf16 >= 2.5, fp32+Adam >= 1.4, sparse <= 1.05x changed bytes + 64 KiB
// per step, frozen ~0.
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/common.h"
#include "bench/disk_meter.h"
#include "bench/torch_trace.h"
#include "client/cli/synthetic_state.h"
#include "stagger/checkpointer.h"

namespace stagger::bench {
namespace {

// One Checkpointer saving one tensor class with one codec.
struct ClassRun {
  std::string cls;
  std::string codec;
  std::vector<size_t> tensors;  // indexes into state.tensors()
  std::unique_ptr<Checkpointer> ck;
  std::vector<SaveStats> stats;  // one per step
};

// What changed in one class between the last two steps.
struct Changed {
  uint64_t bytes = 0;        // bytes that differ
  uint64_t chunks = 0;       // chunks (per tensor, chunk_size) that differ
  uint64_t chunk_bytes = 0;  // their lengths (the last chunk may be partial)
};

// One job's steps 2..N: raw and client-shipped bytes, and how much the
// server's disk grew.
struct Growth {
  uint64_t raw = 0, shipped = 0, disk = 0;
  uint64_t peak = 0;  // the job's largest growth over step 1 at any time
};

// Samples the allocated bytes of each job's segments every 50 ms while it
// lives, keeping each one's largest: the peak before the server's rebases
// and compaction settle (the server's reserve ahead of appends included,
// at most an eighth of a segment's bytes).
class PeakSampler {
 public:
  PeakSampler(const std::string& data_dir, std::vector<std::string> jobs)
      : data_(data_dir), jobs_(std::move(jobs)) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        Sample();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      Sample();
    });
  }
  ~PeakSampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t peak(const std::string& job) {
    std::lock_guard<std::mutex> l(mu_);
    return peak_[job];
  }

 private:
  void Sample() {
    for (const std::string& job : jobs_) {
      const uint64_t now = DiskBytes(data_ + "/segments/" + job);
      std::lock_guard<std::mutex> l(mu_);
      peak_[job] = std::max(peak_[job], now);
    }
  }
  const std::string data_;
  const std::vector<std::string> jobs_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, uint64_t> peak_;
  std::thread thread_;
};

// "a:1 b:2", sorted by name.
std::string Counts(const std::map<std::string, uint64_t>& m) {
  std::string out;
  for (const auto& [name, n] : m) {
    if (!out.empty()) out += " ";
    out += name + ":" + std::to_string(n);
  }
  return out.empty() ? "-" : out;
}

bool IsDense(const std::string& cls) {
  return cls == "dense_bf16" || cls == "dense_fp32_adam";
}

// Job names allow [A-Za-z0-9._-]: "bytegroup+zstd" becomes "bytegroup.zstd".
std::string JobName(const std::string& cls, const std::string& codec) {
  std::string job = "bench-incremental-" + cls + "-" + codec;
  for (char& c : job) {
    if (c == '+') c = '.';
  }
  return job;
}

std::string CodecMix(const SaveStats& s) {
  std::string out;
  for (const auto& [codec, n] : s.codec_chunks) {
    if (!out.empty()) out += " ";
    out += codec + ":" + std::to_string(n);
  }
  return out.empty() ? "-" : out;
}

Changed CompareBytes(const std::vector<char>& before,
                     const std::vector<char>& after, uint64_t chunk_size) {
  Changed c;
  const size_t n = std::min(before.size(), after.size());
  for (size_t off = 0; off < n; off += chunk_size) {
    size_t len = std::min<uint64_t>(chunk_size, n - off);
    if (std::memcmp(before.data() + off, after.data() + off, len) == 0) {
      continue;
    }
    ++c.chunks;
    c.chunk_bytes += len;
    for (size_t i = off; i < off + len; ++i) {
      c.bytes += before[i] != after[i];
    }
  }
  return c;
}

Status SaveAll(std::vector<ClassRun>& runs, int64_t step) {
  for (ClassRun& r : runs) {
    auto h = r.ck->Save(step);
    if (!h.ok()) return WithContext(h.status(), "Save " + r.cls);
    STAGGER_RETURN_IF_ERROR(
        WithContext(h->Wait(), "waiting for durable " + r.cls));
    r.stats.push_back(h->stats());
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags flags(
      "bench_incremental",
      {{"size", {"256MiB", "bytes of model state (all classes together)"}},
       {"json", {"", "write the figures as JSON to this file"}},
       {"data", {"/tmp", "parent of the temporary data directory"}},
       {"steps", {"5", "saves per class: step 1 full, then Step() + save"}},
       {"chunk-size",
        {std::to_string(CheckpointerOptions{}.chunk_size >> 10) + "KiB",
         "CheckpointerOptions.chunk_size (default: the library's)"}},
       {"codec", {"auto", "CheckpointerOptions.codec for every class"}},
       {"compare",
        {"zstd",
         "codec the dense classes are also saved with (--compare= for none)"}},
       {"pipeline-threads",
        {"0", "CheckpointerOptions.pipeline_threads (0: auto)"}},
       {"adaptive",
        {"1",
         "1: default options (adaptive_codec: the codec policy decides, "
         "client/README.md); 0: every chunk encoded"}},
       {"server", {"", "stagger-server binary (default: next to this one)"}},
       {"deadline-s",
        {"0",
         "CheckpointerOptions.qos_deadline_s for every save (0: none, the "
         "default)"}},
       {"trace",
        {"",
         "also replay this trace of real training "
         "(bench/data/make_torch_trace.py --out DIR)"}},
       {"interval-s",
        {"2",
         "seconds of training between a save and the next step (0: saves "
         "back to back, the server's background work behind them)"}},
       {"seed", {"1", "SyntheticState seed"}}});
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail("incremental", s);
  if (flags.help()) {
    flags.PrintUsage();
    return 0;
  }
  const std::string adaptive_flag = flags.Get("adaptive");
  if (adaptive_flag != "0" && adaptive_flag != "1") {
    return Fail("incremental",
                absl::InvalidArgumentError("--adaptive must be 0 or 1, got '" +
                                           adaptive_flag + "'"));
  }
  const bool adaptive = adaptive_flag == "1";
  auto size = flags.GetSize("size");
  auto steps = flags.GetInt("steps");
  auto chunk_size = flags.GetSize("chunk-size");
  auto seed = flags.GetInt("seed");
  if (!size.ok()) return Fail("incremental", size.status());
  if (!steps.ok()) return Fail("incremental", steps.status());
  if (!chunk_size.ok()) return Fail("incremental", chunk_size.status());
  if (!seed.ok()) return Fail("incremental", seed.status());
  if (*steps < 2) {
    return Fail("incremental",
                absl::InvalidArgumentError("--steps must be at least 2"));
  }
  auto interval_s = flags.GetSeconds("interval-s");
  if (!interval_s.ok()) return Fail("incremental", interval_s.status());
  const std::string codec = flags.Get("codec");
  std::string compare = flags.Get("compare");
  if (compare == codec) compare.clear();
  for (const auto& [flag, value] :
       {std::pair<const char*, std::string>{"--codec", codec},
        {"--compare", compare}}) {
    if (value.empty()) continue;
    if (auto parsed = ParseCodecChoice(value); !parsed.ok()) {
      return Fail("incremental", WithContext(parsed.status(), flag));
    }
  }
  auto dir = TempDir::Make(flags.Get("data"), "stagger-bench-incremental");
  if (!dir.ok()) return Fail("incremental", dir.status());

  client::SyntheticState state(*size, static_cast<uint64_t>(*seed));
  auto& tensors = state.tensors();

  // Classes in the order the state lists them.
  std::vector<std::string> classes;
  std::map<std::string, std::vector<size_t>> members;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (members.find(tensors[i].cls) == members.end()) {
      classes.push_back(tensors[i].cls);
    }
    members[tensors[i].cls].push_back(i);
  }
  std::vector<ClassRun> runs;
  for (const std::string& cls : classes) {
    runs.push_back({cls, codec, members[cls], nullptr, {}});
    if (!compare.empty() && IsDense(cls)) {
      runs.push_back({cls, compare, members[cls], nullptr, {}});
    }
  }

  printf(
      "bench_incremental: %s of realistic state in %zu tensors, %zu "
      "classes, %d steps, chunk %s, stagger-server on %s\n",
      FormatBytes(state.total_bytes()).c_str(), tensors.size(), classes.size(),
      *steps, FormatBytes(*chunk_size).c_str(), (*dir)->path().c_str());

  std::string server_bin = flags.Get("server");
  if (server_bin.empty()) server_bin = BinDir() + "/stagger-server";
  auto meter = DiskMeter::Start(server_bin, (*dir)->path() + "/data");
  if (!meter.ok()) return Fail("incremental", meter.status());
  std::vector<std::string> jobs;
  for (ClassRun& r : runs) jobs.push_back(JobName(r.cls, r.codec));

  for (ClassRun& r : runs) {
    CheckpointerOptions o;
    o.servers = (*meter)->grpc_address();
    o.job = JobName(r.cls, r.codec);
    o.chunk_size = *chunk_size;
    o.codec = *ParseCodecChoice(r.codec);  // checked with the flags
    // The question is bytes: every chunk encoded, whatever the link speed
    // (--adaptive to let "auto" send raw where encoding is the bottleneck).
    o.adaptive_codec = adaptive;
    // The comparison is the codec alone on each full chunk: no deltas.
    if (r.codec != codec) o.delta_chain_max = 0;
    o.pipeline_threads = atoi(flags.Get("pipeline-threads").c_str());
    o.qos_deadline_s = atof(flags.Get("deadline-s").c_str());
    auto ck = Checkpointer::Open(o);
    if (!ck.ok()) {
      return Fail("incremental", WithContext(ck.status(), "Open " + o.job));
    }
    r.ck = std::move(*ck);
    for (size_t i : r.tensors) {
      client::SyntheticTensor& t = tensors[i];
      s = r.ck->Register({t.name, t.dtype, t.shape, t.bytes.data()});
      if (!s.ok()) return Fail("incremental", WithContext(s, o.job));
    }
  }

  // Step 1: everything is new. Steps 2..N: one training step, then a save.
  s = SaveAll(runs, 1);
  if (!s.ok()) return Fail("incremental", s);
  auto disk_first = (*meter)->Measure(jobs);
  if (!disk_first.ok()) return Fail("incremental", disk_first.status());
  std::vector<std::vector<char>> before;
  PeakSampler sampler((*meter)->data_dir(), jobs);
  for (int64_t step = 2; s.ok() && step <= *steps; ++step) {
    if (step == *steps) {
      before.clear();
      for (const auto& t : tensors) before.push_back(t.bytes);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(*interval_s));
    state.Step();
    s = SaveAll(runs, step);
  }
  if (!s.ok()) return Fail("incremental", s);
  auto disk_last = (*meter)->Measure(jobs);
  if (!disk_last.ok()) return Fail("incremental", disk_last.status());
  sampler.Stop();  // it saw the server settle
  for (ClassRun& r : runs) r.ck.reset();
  // Per job: raw and client-shipped bytes of steps 2..N, and disk growth.
  std::map<std::string, Growth> growth;
  for (const ClassRun& r : runs) {
    Growth& g = growth[r.cls + "/" + r.codec];
    for (size_t i = 1; i < r.stats.size(); ++i) {
      g.raw += r.stats[i].bytes_raw;
      g.shipped += r.stats[i].bytes_shipped;
    }
    const std::string job = JobName(r.cls, r.codec);
    g.disk = disk_last->jobs[job] - disk_first->jobs[job];
    const uint64_t peak = sampler.peak(job);
    g.peak = peak > disk_first->jobs[job] ? peak - disk_first->jobs[job] : 0;
  }

  std::map<std::string, Changed> changed;
  for (const std::string& cls : classes) {
    Changed& c = changed[cls];
    for (size_t i : members[cls]) {
      Changed t = CompareBytes(before[i], tensors[i].bytes, *chunk_size);
      c.bytes += t.bytes;
      c.chunks += t.chunks;
      c.chunk_bytes += t.chunk_bytes;
    }
  }

  printf("last step (%d) per class; changed = bytes differing from step %d\n",
         *steps, *steps - 1);
  Table table({"class", "codec", "raw 2..N", "disk 2..N", "raw/disk",
               "peak 2..N", "raw/peak", "client 2..N", "last raw/shipped",
               "unchanged/chunks", "codec mix", "why", "changed",
               "changed_chunks", "shipped/changed", "enc_MBps"});
  std::map<std::string, const SaveStats*> last;  // "cls/codec" -> stats
  uint64_t total_raw = 0, total_shipped = 0, total_changed = 0;
  for (const ClassRun& r : runs) {
    const SaveStats& st = r.stats.back();
    const Changed& c = changed[r.cls];
    last[r.cls + "/" + r.codec] = &st;
    if (r.codec == codec) {
      total_raw += st.bytes_raw;
      total_shipped += st.bytes_shipped;
      total_changed += c.bytes;
    }
    const Growth& g = growth[r.cls + "/" + r.codec];
    table.AddRow(
        {r.cls, r.codec, FormatBytes(g.raw), FormatBytes(g.disk),
         Ratio(g.raw, g.disk), FormatBytes(g.peak), Ratio(g.raw, g.peak),
         FormatBytes(g.shipped), Ratio(st.bytes_raw, st.bytes_shipped),
         std::to_string(st.chunks_unchanged) + "/" + std::to_string(st.chunks),
         CodecMix(st), Counts(st.codec_reasons), FormatBytes(c.bytes),
         std::to_string(c.chunks) + " (" + FormatBytes(c.chunk_bytes) + ")",
         Ratio(st.bytes_shipped, c.bytes),
         Fixed(Div(st.bytes_raw, st.durable_s) / 1e6, 1)});
  }
  Growth all;
  for (const ClassRun& r : runs) {
    if (r.codec != codec) continue;
    const Growth& g = growth[r.cls + "/" + r.codec];
    all.raw += g.raw;
    all.disk += g.disk;
    all.peak += g.peak;
    all.shipped += g.shipped;
  }
  table.AddRow({"all classes", codec, FormatBytes(all.raw),
                FormatBytes(all.disk), Ratio(all.raw, all.disk),
                FormatBytes(all.peak), Ratio(all.raw, all.peak),
                FormatBytes(all.shipped), Ratio(total_raw, total_shipped), "-",
                "-", "-", FormatBytes(total_changed), "-",
                Ratio(total_shipped, total_changed), "-"});
  table.Print();
  printf("index and manifests (meta/): %s after step 1, %s after step %d\n",
         FormatBytes(disk_first->meta).c_str(),
         FormatBytes(disk_last->meta).c_str(), *steps);
  // Write amplification: what the server wrote to storage over steps 2..N
  // and its settling (rebases, compaction, the index), as the kernel
  // counts it, per raw byte of every job (both codecs) in those steps.
  uint64_t raw_received = 0;
  for (const auto& [key, g] : growth) raw_received += g.raw;
  const double write_amp = Div(static_cast<double>(disk_last->server_written),
                               static_cast<double>(raw_received));
  printf("server writes, steps 2..%d and settling: %s for %s raw (%sx)\n",
         *steps, FormatBytes(disk_last->server_written).c_str(),
         FormatBytes(raw_received).c_str(), Fixed(write_amp, 3).c_str());

  auto shipped = [&](const std::string& cls, const std::string& c) {
    auto it = last.find(cls + "/" + c);
    return it == last.end() ? 0.0
                            : static_cast<double>(it->second->bytes_shipped);
  };
  auto raw = [&](const std::string& cls) {
    auto it = last.find(cls + "/" + codec);
    return it == last.end() ? 0.0 : static_cast<double>(it->second->bytes_raw);
  };
  if (!compare.empty()) {
    printf("%s vs %s (shipped %s / shipped %s):", codec.c_str(),
           compare.c_str(), compare.c_str(), codec.c_str());
    for (const std::string& cls : classes) {
      if (!IsDense(cls)) continue;
      printf(" %s %sx", cls.c_str(),
             Ratio(shipped(cls, compare), shipped(cls, codec)).c_str());
    }
    printf("\n");
  }

  const double bf16_ratio =
      Div(raw("dense_bf16"), shipped("dense_bf16", codec));
  auto disk_ratio = [&](const std::string& cls) {
    const Growth& g = growth[cls + "/" + codec];
    return Div(static_cast<double>(g.raw), static_cast<double>(g.disk));
  };
  const double bf16_disk_ratio = disk_ratio("dense_bf16");
  ResultLine result("incremental");
  result.Add("bf16_disk_ratio", bf16_disk_ratio);
  result.Add("fp32_adam_disk_ratio", disk_ratio("dense_fp32_adam"));
  auto peak_ratio = [&](const std::string& cls) {
    const Growth& g = growth[cls + "/" + codec];
    return Div(static_cast<double>(g.raw), static_cast<double>(g.peak));
  };
  result.Add("bf16_peak_ratio", peak_ratio("dense_bf16"));
  result.Add("fp32_adam_peak_ratio", peak_ratio("dense_fp32_adam"));
  result.Add("write_amp", write_amp);
  // Per step: disk growth / changed bytes of the last step.
  result.Add("sparse_disk_x_changed",
             Div(static_cast<double>(growth["embedding_sparse/" + codec].disk) /
                     (*steps - 1),
                 static_cast<double>(changed["embedding_sparse"].bytes)));
  result.Add("frozen_disk",
             static_cast<double>(growth["frozen_base/" + codec].disk));
  result.Add("bf16_ratio", bf16_ratio);
  result.Add("fp32_adam_ratio",
             Div(raw("dense_fp32_adam"), shipped("dense_fp32_adam", codec)));
  result.Add("sparse_x_changed",
             Div(shipped("embedding_sparse", codec),
                 static_cast<double>(changed["embedding_sparse"].bytes)));
  result.Add("frozen_shipped", shipped("frozen_base", codec));
  if (!flags.Get("trace").empty()) {
    auto trace = ReadTrace(flags.Get("trace"));
    if (!trace.ok()) return Fail("incremental", trace.status());
    s = ReplayTrace(*trace, meter->get(), *chunk_size, adaptive,
                    atof(flags.Get("deadline-s").c_str()), &result);
    if (!s.ok()) return Fail("incremental", WithContext(s, "trace"));
  }

  JsonReport json;
  json.Set("name", std::string("incremental"));
  json.Set("size_bytes", static_cast<double>(state.total_bytes()));
  json.Set("steps", *steps);
  json.Set("chunk_size", static_cast<double>(*chunk_size));
  json.Set("codec", codec);
  json.Set("compare", compare);
  for (const auto& [key, value] : result.figures()) json.Set(key, value);
  if (!compare.empty()) {
    json.Set("bf16_compare_ratio",
             Div(raw("dense_bf16"), shipped("dense_bf16", compare)));
    json.Set("fp32_adam_compare_ratio",
             Div(raw("dense_fp32_adam"), shipped("dense_fp32_adam", compare)));
  }
  json.Set("ratio", bf16_disk_ratio);
  for (const ClassRun& r : runs) {
    const Changed& c = changed[r.cls];
    for (size_t i = 0; i < r.stats.size(); ++i) {
      const SaveStats& st = r.stats[i];
      const bool is_last = i + 1 == r.stats.size();
      json.AddRow({{"class", r.cls},
                   {"codec", r.codec},
                   {"step", std::to_string(i + 1)},
                   {"bytes_raw", std::to_string(st.bytes_raw)},
                   {"bytes_shipped", std::to_string(st.bytes_shipped)},
                   {"chunks", std::to_string(st.chunks)},
                   {"chunks_unchanged", std::to_string(st.chunks_unchanged)},
                   {"codec_mix", CodecMix(st)},
                   {"changed_bytes", is_last ? std::to_string(c.bytes) : ""},
                   {"changed_chunk_bytes",
                    is_last ? std::to_string(c.chunk_bytes) : ""},
                   {"snapshot_s", Fixed(st.snapshot_s, 6)},
                   {"durable_s", Fixed(st.durable_s, 6)}});
    }
  }
  s = json.Write(flags.Get("json"));
  if (!s.ok()) return Fail("incremental", s);
  result.Print(bf16_disk_ratio);
  return 0;
}

}  // namespace
}  // namespace stagger::bench

int main(int argc, char** argv) { return stagger::bench::Main(argc, argv); }
