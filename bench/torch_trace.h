// Replays a trace of real training (bench/data/make_torch_trace.py) through
// stagger: each dump becomes a step, saved on top of the previous one, and
// the bytes shipped for the last step are reported per tensor class.
#ifndef STAGGER_BENCH_TORCH_TRACE_H_
#define STAGGER_BENCH_TORCH_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bench/common.h"
#include "bench/disk_meter.h"
#include "stagger/status.h"

namespace stagger::bench {

struct TraceTensor {
  std::string name;
  std::string dtype;  // "F32" or "BF16"
  std::vector<int64_t> shape;
  std::string file;  // inside the step's directory
};

struct TraceStep {
  int64_t step = 0;
  std::string dir;
  std::vector<TraceTensor> tensors;
};

// Reads DIR/step_*/index.txt, steps in order. INVALID_ARGUMENT naming the
// file and line for a malformed index; NOT_FOUND when DIR has no steps.
Result<std::vector<TraceStep>> ReadTrace(const std::string& dir);

// Saves every step of `trace` to `meter`'s server, one Checkpointer per
// class (model.* fp32, bf16.* bf16, optim.* Adam moments), measures the
// server's disk after the first and the last dump, prints a table and adds
// trace_{fp32,bf16,adam}_ratio (raw / shipped, last dump) and
// trace_{fp32,bf16,adam}_disk_ratio (raw / disk growth, dumps 2..N) to
// `result`.
// `deadline_s` > 0 is every save's CheckpointerOptions::qos_deadline_s.
Status ReplayTrace(const std::vector<TraceStep>& trace, DiskMeter* meter,
                   uint64_t chunk_size, bool adaptive, double deadline_s,
                   ResultLine* result);

}  // namespace stagger::bench

#endif  // STAGGER_BENCH_TORCH_TRACE_H_
