// bench_gpu: how long does Save() stall a training loop whose state is in
// CUDA device memory, and how fast do the bytes leave the device?
//
// For every size it measures, in one run:
//   floor   pinned cudaMemcpyAsync device-to-host of the same bytes into
//           preallocated pinned memory, time to completion (best of 2);
//   stall   time stagger::Checkpointer::Save() blocks for the same bytes
//           registered as CUDA BF16 tensors ("embedded:" server in a temp
//           dir), per mode: "direct" (device -> pinned staging) and
//           "device" (device-to-device snapshot first, options
//           device_snapshot; by default only up to --device-max-gib);
//   D2H     bytes / snapshot_s of that save.
// Prints a table per size and, last, a line
//   RESULT gpu size_gib=... stall_s=... floor_s=... ... ratio=stall/floor
// for the largest size measured ("direct" mode when measured). When the
// Checkpointer cannot take CUDA tensors (a build or a device without CUDA
// support), it says so, still prints the floors and exits with 3.
// Exit codes: 0 all measured, 1 a save failed, 2 no device or set-up
// failure, 3 floors only.
#include <cuda_runtime_api.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "stagger/checkpointer.h"
#include "stagger/options.h"
#include "stagger/status.h"
#include "stagger/tensor.h"

namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kTensorBytes = 512 * kMiB;  // one "layer" per 512 MiB
constexpr uint64_t kFillTile = 64 * kMiB;

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Flags {
  std::vector<double> sizes_gib = {1, 4, 16};
  std::string json;
  std::string dir;  // parent of the temp dir; default $TMPDIR or /tmp
  double staging_gib = 2;
  std::vector<std::string> modes = {"direct", "device"};
  double device_max_gib = 4;
  uint64_t chunk_mib = 4;
  std::string codec = "zstd";
  std::string snapshot_overlap = "auto";
  bool keep = false;
};

void Usage() {
  std::printf(
      "usage: bench_gpu [--sizes-gib 1,4,16 | --size 4GiB] [--json OUT]\n"
      "  [--dir PARENT] [--staging-gib 2] [--modes direct,device]\n"
      "  [--device-max-gib 4] [--chunk-mib 4] [--codec zstd|raw]\n"
      "  [--snapshot-overlap auto|on|off] [--keep]\n");
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "4GiB", "512MiB", "1G", "3.5GiB", "1073741824" -> GiB.
bool ParseSizeGiB(const std::string& text, double* gib) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit(end);
  double scale = 1.0 / kGiB;
  if (unit == "G" || unit == "GiB" || unit == "g") {
    scale = 1;
  } else if (unit == "M" || unit == "MiB" || unit == "m") {
    scale = 1.0 / 1024;
  } else if (unit == "T" || unit == "TiB") {
    scale = 1024;
  } else if (!unit.empty() && unit != "B") {
    return false;
  }
  *gib = v * scale;
  return v > 0;
}

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    std::string value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (name != "--keep" && name != "--help" && i + 1 < argc) {
      value = argv[++i];
    }
    if (name == "--help") return false;
    if (name == "--keep") {
      f->keep = true;
    } else if (name == "--sizes-gib") {
      f->sizes_gib.clear();
      for (const std::string& s : Split(value)) {
        double g = std::atof(s.c_str());
        if (g <= 0) return false;
        f->sizes_gib.push_back(g);
      }
    } else if (name == "--size") {
      double g = 0;
      if (!ParseSizeGiB(value, &g)) return false;
      f->sizes_gib = {g};
    } else if (name == "--json") {
      f->json = value;
    } else if (name == "--dir") {
      f->dir = value;
    } else if (name == "--staging-gib") {
      f->staging_gib = std::atof(value.c_str());
    } else if (name == "--modes") {
      f->modes = Split(value);
    } else if (name == "--device-max-gib") {
      f->device_max_gib = std::atof(value.c_str());
    } else if (name == "--chunk-mib") {
      f->chunk_mib = std::strtoull(value.c_str(), nullptr, 10);
    } else if (name == "--codec") {
      f->codec = value;
    } else if (name == "--snapshot-overlap") {
      f->snapshot_overlap = value;
      if (value != "auto" && value != "on" && value != "off") {
        std::fprintf(stderr,
                     "bench_gpu: --snapshot-overlap wants auto, on or off, "
                     "got '%s'\n",
                     value.c_str());
        return false;
      }
    } else {
      std::fprintf(stderr, "bench_gpu: unknown flag %s\n", name.c_str());
      return false;
    }
  }
  for (const std::string& m : f->modes) {
    if (m != "direct" && m != "device") return false;
  }
  std::sort(f->sizes_gib.begin(), f->sizes_gib.end());
  return !f->sizes_gib.empty() && f->chunk_mib > 0 && f->staging_gib > 0;
}

std::string CudaText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

#define CUDA_OR_FAIL(expr, what)                                             \
  do {                                                                       \
    cudaError_t e_ = (expr);                                                 \
    if (e_ != cudaSuccess) {                                                 \
      std::printf("bench_gpu: %s failed: %s\n", what, CudaText(e_).c_str()); \
      return false;                                                          \
    }                                                                        \
  } while (0)

// Weights-like bf16 values: roughly normal (sum of four uniforms), std 0.02,
// so exponents spread over a few binades and mantissas look random.
void MakeBf16(uint16_t* out, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    uint64_t r = x * 0x2545F4914F6CDD1Dull;
    double u = (double(r & 0xFFFF) + double((r >> 16) & 0xFFFF) +
                double((r >> 32) & 0xFFFF) + double(r >> 48)) /
                   65536.0 -
               2.0;  // mean 0, variance 1/3
    float v = float(u * 0.02 * 1.7320508);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits += 0x7FFF + ((bits >> 16) & 1);  // round to nearest even
    out[i] = uint16_t(bits >> 16);
  }
}

// Fills `dev` (len bytes) from a pinned pattern of 2 * kFillTile bytes,
// tile by tile at a shift that depends on the tile and `round`, so no two
// chunks are alike and each round changes every chunk.
class Filler {
 public:
  bool Init() {
    void* p = nullptr;
    CUDA_OR_FAIL(cudaHostAlloc(&p, 2 * kFillTile, cudaHostAllocDefault),
                 "cudaHostAlloc (fill pattern)");
    pattern_ = static_cast<uint16_t*>(p);
    MakeBf16(pattern_, 2 * kFillTile / 2, 42);
    return true;
  }
  ~Filler() {
    if (pattern_ != nullptr) (void)cudaFreeHost(pattern_);
  }
  bool Fill(char* dev, uint64_t len, uint64_t round) {
    const char* src = reinterpret_cast<const char*>(pattern_);
    for (uint64_t off = 0, tile = 0; off < len; off += kFillTile, ++tile) {
      uint64_t shift = ((tile * 7919 + round * 104729) * 2) % kFillTile;
      CUDA_OR_FAIL(
          cudaMemcpy(dev + off, src + shift, std::min(kFillTile, len - off),
                     cudaMemcpyHostToDevice),
          "filling device memory");
    }
    return true;
  }

 private:
  uint16_t* pattern_ = nullptr;
};

struct Row {
  double size_gib = 0;
  std::string mode;
  bool ok = false;
  std::string error;
  double stall_s = NAN;        // measured around Save()
  double stats_stall_s = NAN;  // SaveStats::stall_s
  double snapshot_s = NAN;
  double durable_s = NAN;
  double d2h_gbps = NAN;
  uint64_t bytes_shipped = 0;
  bool staging_limited = false;
};

struct SizeResult {
  double size_gib = 0;
  uint64_t bytes = 0;
  double floor_s = NAN;
  std::vector<Row> rows;
};

std::string Fmt(double v, int decimals = 4) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// Saves `dev` (bytes) through a fresh Checkpointer in `dir` and times it.
// Returns false (with row->error) when stagger cannot take CUDA tensors.
bool MeasureStagger(const Flags& f, const std::string& mode,
                    const std::string& dir, char* dev, uint64_t bytes,
                    char* warm_dev, uint64_t warm_bytes, Filler& filler,
                    cudaStream_t stream, Row* row) {
  stagger::CheckpointerOptions o;
  o.servers = "embedded:" + dir;
  o.job = "gpu-" + mode;
  o.chunk_size = f.chunk_mib * kMiB;
  auto codec = stagger::ParseCodecChoice(f.codec);
  auto overlap = stagger::ParseSnapshotOverlap(f.snapshot_overlap);
  if (!codec.ok() || !overlap.ok()) {
    row->error =
        std::string((codec.ok() ? overlap.status() : codec.status()).message());
    return false;
  }
  o.codec = *codec;
  o.staging_bytes = uint64_t(f.staging_gib * kGiB);
  o.device_snapshot = mode == "device";
  o.snapshot_overlap = *overlap;
  auto ck = stagger::Checkpointer::Open(o);
  if (!ck.ok()) {
    row->error = "Checkpointer::Open: " + std::string(ck.status().ToString());
    return false;
  }
  auto register_all = [&](char* base, uint64_t len,
                          const std::string& prefix) -> stagger::Status {
    (*ck)->ClearRegistrations();
    for (uint64_t off = 0, i = 0; off < len; off += kTensorBytes, ++i) {
      stagger::TensorSpec t;
      char name[64];
      std::snprintf(name, sizeof(name), "%s.%04llu.weight", prefix.c_str(),
                    static_cast<unsigned long long>(i));
      t.name = name;
      t.dtype = "BF16";
      t.shape = {int64_t(std::min(kTensorBytes, len - off) / 2)};
      t.data = base + off;
      t.device = stagger::Device::kCuda;
      t.device_index = 0;
      STAGGER_RETURN_IF_ERROR((*ck)->Register(t));
    }
    return absl::OkStatus();
  };
  // Warm-up: the first CUDA tensor creates the snapshot source and pins the
  // staging pool; the first save connects. Neither belongs in the stall.
  stagger::Status s = register_all(warm_dev, warm_bytes, "warmup");
  if (!s.ok()) {
    row->error = "Register(CUDA tensor): " + std::string(s.ToString());
    return false;
  }
  stagger::SaveOptions so;
  so.cuda_stream = stream;
  auto warm = (*ck)->Save(0, so);
  if (!warm.ok() || !warm->Wait().ok()) {
    row->error =
        "warm-up save: " +
        std::string((warm.ok() ? warm->Wait() : warm.status()).ToString());
    return false;
  }
  s = register_all(dev, bytes, "layer");
  if (!s.ok()) {
    row->error = "Register(CUDA tensor): " + std::string(s.ToString());
    return false;
  }
  // A training step changed every byte since any earlier save.
  if (!filler.Fill(dev, bytes, /*round=*/1)) {
    row->error = "refill failed";
    return false;
  }
  if (cudaDeviceSynchronize() != cudaSuccess) {
    row->error = "cudaDeviceSynchronize before the timed save failed";
    return false;
  }
  Clock::time_point t0 = Clock::now();
  auto h = (*ck)->Save(1, so);
  row->stall_s = Since(t0);
  if (!h.ok()) {
    row->error = "Save: " + std::string(h.status().ToString());
    return true;
  }
  stagger::Status done = h->Wait();
  stagger::SaveStats st = h->stats();
  row->stats_stall_s = st.stall_s;
  row->snapshot_s = st.snapshot_s;
  row->durable_s = st.durable_s;
  row->bytes_shipped = st.bytes_shipped;
  row->staging_limited = st.staging_limited;
  if (st.snapshot_s > 0) row->d2h_gbps = double(bytes) / st.snapshot_s / 1e9;
  if (!done.ok()) {
    row->error = "save did not commit: " + std::string(done.ToString());
    return true;
  }
  row->ok = true;
  return true;
}

bool MeasureFloor(char* dev, char* pinned, uint64_t bytes, cudaStream_t stream,
                  double* floor_s) {
  // Warm the path (first-touch costs of the copy engine and mappings).
  CUDA_OR_FAIL(cudaMemcpyAsync(pinned, dev, std::min(bytes, 256 * kMiB),
                               cudaMemcpyDeviceToHost, stream),
               "warm-up D2H copy");
  CUDA_OR_FAIL(cudaStreamSynchronize(stream), "warm-up D2H copy");
  double best = INFINITY;
  for (int i = 0; i < 2; ++i) {
    Clock::time_point t0 = Clock::now();
    CUDA_OR_FAIL(
        cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, stream),
        "D2H floor copy");
    CUDA_OR_FAIL(cudaStreamSynchronize(stream), "D2H floor copy");
    best = std::min(best, Since(t0));
  }
  *floor_s = best;
  return true;
}

void PrintSize(const SizeResult& r) {
  std::printf("\nsize %.3g GiB (%llu bytes): pinned D2H floor %s s (%s GB/s)\n",
              r.size_gib, static_cast<unsigned long long>(r.bytes),
              Fmt(r.floor_s).c_str(),
              Fmt(double(r.bytes) / r.floor_s / 1e9, 1).c_str());
  if (r.rows.empty()) return;
  std::printf("  %-7s %9s %9s %9s %10s %9s %11s %9s %s\n", "mode", "stall_s",
              "snap_s", "durable_s", "d2h_GB/s", "stall/fl", "staging_lim",
              "shipped", "note");
  for (const Row& row : r.rows) {
    std::printf("  %-7s %9s %9s %9s %10s %9s %11s %8.2fG %s\n",
                row.mode.c_str(), Fmt(row.stall_s).c_str(),
                Fmt(row.snapshot_s).c_str(), Fmt(row.durable_s).c_str(),
                Fmt(row.d2h_gbps, 1).c_str(),
                Fmt(row.stall_s / r.floor_s, 2).c_str(),
                row.staging_limited ? "yes" : "no",
                double(row.bytes_shipped) / kGiB, row.error.c_str());
  }
  std::fflush(stdout);
}

void WriteJson(const std::string& path, const std::string& device,
               const Flags& f, const std::vector<SizeResult>& results) {
  if (path.empty()) return;
  auto num = [](double v) {
    return std::isnan(v) ? std::string("null") : Fmt(v, 6);
  };
  std::ofstream out(path);
  out << "{\"bench\":\"gpu\",\"device\":\"" << device
      << "\",\"staging_gib\":" << f.staging_gib
      << ",\"chunk_mib\":" << f.chunk_mib << ",\"codec\":\"" << f.codec
      << "\",\"rows\":[";
  bool first = true;
  for (const SizeResult& r : results) {
    for (const Row& row : r.rows) {
      if (!first) out << ",";
      first = false;
      std::string err;
      for (char c : row.error) {
        if (c == '"' || c == '\\') err += '\\';
        if (c >= 0x20) err += c;
      }
      out << "{\"size_gib\":" << r.size_gib << ",\"bytes\":" << r.bytes
          << ",\"floor_s\":" << num(r.floor_s) << ",\"mode\":\"" << row.mode
          << "\",\"ok\":" << (row.ok ? "true" : "false")
          << ",\"stall_s\":" << num(row.stall_s)
          << ",\"stats_stall_s\":" << num(row.stats_stall_s)
          << ",\"snapshot_s\":" << num(row.snapshot_s)
          << ",\"durable_s\":" << num(row.durable_s)
          << ",\"d2h_gbps\":" << num(row.d2h_gbps)
          << ",\"bytes_shipped\":" << row.bytes_shipped
          << ",\"staging_limited\":" << (row.staging_limited ? "true" : "false")
          << ",\"error\":\"" << err << "\"}";
    }
    if (r.rows.empty()) {
      if (!first) out << ",";
      first = false;
      out << "{\"size_gib\":" << r.size_gib << ",\"bytes\":" << r.bytes
          << ",\"floor_s\":" << num(r.floor_s) << ",\"mode\":\"floor\"}";
    }
  }
  out << "]}\n";
}

int Run(const Flags& f) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("bench_gpu: no CUDA device: %s\n",
                e != cudaSuccess ? CudaText(e).c_str() : "none visible");
    std::printf("RESULT gpu stall_s=nan floor_s=nan ratio=nan\n");
    return 2;
  }
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  size_t free_dev = 0, total_dev = 0;
  (void)cudaMemGetInfo(&free_dev, &total_dev);
  struct sysinfo si {};
  sysinfo(&si);
  std::printf(
      "bench_gpu: device 0 %s, %.1f GiB (%.1f free), host RAM %.1f "
      "GiB; staging %.3g GiB, chunk %llu MiB, codec %s\n",
      prop.name, double(total_dev) / kGiB, double(free_dev) / kGiB,
      double(si.totalram) * si.mem_unit / kGiB, f.staging_gib,
      static_cast<unsigned long long>(f.chunk_mib), f.codec.c_str());

  const char* tmp = std::getenv("TMPDIR");
  std::string parent = !f.dir.empty() ? f.dir : (tmp ? tmp : "/tmp");
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  std::string templ = parent + "/stagger-gpu-bench-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    std::printf("bench_gpu: cannot make a temp dir under %s\n", parent.c_str());
    return 2;
  }
  const std::string base(buf.data());

  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
      cudaSuccess) {
    std::printf("bench_gpu: cudaStreamCreate failed\n");
    return 2;
  }
  Filler filler;
  if (!filler.Init()) return 2;

  const uint64_t max_bytes = uint64_t(f.sizes_gib.back() * kGiB) & ~uint64_t{1};
  void* pinned = nullptr;
  Clock::time_point tp = Clock::now();
  e = cudaHostAlloc(&pinned, max_bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    std::printf("bench_gpu: cudaHostAlloc(%llu) for the floor failed: %s\n",
                static_cast<unsigned long long>(max_bytes),
                CudaText(e).c_str());
    return 2;
  }
  std::printf("bench_gpu: pinned %.1f GiB for the floor in %.1f s\n",
              double(max_bytes) / kGiB, Since(tp));

  const uint64_t warm_bytes = 256 * kMiB;
  void* warm_dev = nullptr;
  if (cudaMalloc(&warm_dev, warm_bytes) != cudaSuccess ||
      !filler.Fill(static_cast<char*>(warm_dev), warm_bytes, 7)) {
    std::printf("bench_gpu: warm-up tensor allocation failed\n");
    return 2;
  }

  std::vector<SizeResult> results;
  bool stagger_usable = true;
  std::string stagger_error;
  for (double gib : f.sizes_gib) {
    SizeResult r;
    r.size_gib = gib;
    r.bytes = uint64_t(gib * kGiB) & ~uint64_t{1};
    void* dev = nullptr;
    e = cudaMalloc(&dev, r.bytes);
    if (e != cudaSuccess) {
      std::printf("\nsize %.3g GiB: skipped, cudaMalloc failed: %s\n", gib,
                  CudaText(e).c_str());
      continue;
    }
    char* d = static_cast<char*>(dev);
    Clock::time_point tf = Clock::now();
    if (!filler.Fill(d, r.bytes, 0) ||
        !MeasureFloor(d, static_cast<char*>(pinned), r.bytes, stream,
                      &r.floor_s)) {
      (void)cudaFree(dev);
      continue;
    }
    std::printf("\nsize %.3g GiB: filled and floor measured in %.1f s\n", gib,
                Since(tf));
    for (const std::string& mode : f.modes) {
      if (!stagger_usable) break;
      if (mode == "device" && gib > f.device_max_gib) continue;
      Row row;
      row.size_gib = gib;
      row.mode = mode;
      const std::string dir =
          base + "/" + mode + "-" + std::to_string(results.size());
      auto space = std::filesystem::space(base, ec);
      if (!ec && space.available < r.bytes + 2 * kGiB) {
        row.error = "skipped: " + std::to_string(space.available / kGiB) +
                    " GiB free on disk";
        r.rows.push_back(row);
        continue;
      }
      Clock::time_point ts = Clock::now();
      if (!MeasureStagger(f, mode, dir, d, r.bytes,
                          static_cast<char*>(warm_dev), warm_bytes, filler,
                          stream, &row)) {
        stagger_usable = false;
        stagger_error = row.error;
        std::printf("bench_gpu: stagger cannot save CUDA tensors here: %s\n",
                    row.error.c_str());
        std::printf("bench_gpu: printing the pinned D2H floors only\n");
      }
      std::printf("  %s: done in %.1f s\n", mode.c_str(), Since(ts));
      r.rows.push_back(row);
      // The Checkpointer is closed: its embedded server is gone too.
      std::filesystem::remove_all(dir, ec);
    }
    (void)cudaFree(dev);
    PrintSize(r);
    results.push_back(r);
    WriteJson(f.json, prop.name, f, results);
  }
  (void)cudaFree(warm_dev);
  (void)cudaFreeHost(pinned);
  (void)cudaStreamDestroy(stream);
  if (!f.keep) std::filesystem::remove_all(base, ec);

  // Summary, then the RESULT line last.
  std::printf(
      "\nsummary (stall = Save() return; floor = pinned "
      "cudaMemcpyAsync D2H; staging %.3g GiB)\n",
      f.staging_gib);
  std::printf("  %8s %-7s %9s %9s %9s %10s\n", "size_GiB", "mode", "stall_s",
              "floor_s", "ratio", "d2h_GB/s");
  for (const SizeResult& r : results) {
    if (r.rows.empty()) {
      std::printf("  %8.3g %-7s %9s %9s %9s %10s\n", r.size_gib, "-", "-",
                  Fmt(r.floor_s).c_str(), "-",
                  Fmt(double(r.bytes) / r.floor_s / 1e9, 1).c_str());
    }
    for (const Row& row : r.rows) {
      std::printf(
          "  %8.3g %-7s %9s %9s %9s %10s %s\n", r.size_gib, row.mode.c_str(),
          Fmt(row.stall_s).c_str(), Fmt(r.floor_s).c_str(),
          Fmt(row.stall_s / r.floor_s, 2).c_str(), Fmt(row.d2h_gbps, 1).c_str(),
          row.ok ? "" : row.error.c_str());
    }
  }
  if (!stagger_usable) {
    std::printf(
        "NOTE: stagger could not save CUDA tensors (%s); only the "
        "floor was measured\n",
        stagger_error.c_str());
  }
  if (results.empty()) {
    std::printf("RESULT gpu stall_s=nan floor_s=nan ratio=nan\n");
    return 1;
  }
  const SizeResult& last = results.back();
  const Row* direct = nullptr;
  const Row* device = nullptr;
  for (const Row& row : last.rows) {
    if (row.mode == "direct") direct = &row;
    if (row.mode == "device") device = &row;
  }
  const Row* main_row = direct != nullptr ? direct : device;
  double stall = main_row != nullptr && !std::isnan(main_row->stall_s)
                     ? main_row->stall_s
                     : NAN;
  std::printf(
      "RESULT gpu size_gib=%g device_snapshot=%d stall_s=%.6g "
      "floor_s=%.6g floor_GBps=%.4g d2h_GBps=%.4g staging_limited=%d",
      last.size_gib, main_row == device && device != nullptr ? 1 : 0, stall,
      last.floor_s, double(last.bytes) / last.floor_s / 1e9,
      main_row != nullptr ? main_row->d2h_gbps : NAN,
      main_row != nullptr && main_row->staging_limited ? 1 : 0);
  if (device != nullptr && device != main_row) {
    std::printf(" device_stall_s=%.6g", device->stall_s);
  }
  std::printf(" ratio=%.6g\n", stall / last.floor_s);
  if (!stagger_usable) return 3;  // floors only
  return main_row != nullptr && main_row->ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!Parse(argc, argv, &f)) {
    Usage();
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return Run(f);
}
