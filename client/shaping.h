// Shaping: the client's QoS (docs/design.md section 6) built from the qos/
// parts for one Checkpointer, from its options:
//
//   pacer      DeadlinePacer over the save's raw bytes: a save with a
//              deadline spreads its chunks so the last is sent by the
//              deadline (raw bytes, so what the encoder saves lowers the
//              rate on the wire instead of finishing early);
//   stagger    the pacer of rank r starts at its StaggerSlot offset;
//   gate       CollectiveGate fed by the training loop's marks;
//   buckets    client and node TokenBuckets (hard caps on wire bytes).
//
// The Sender (sender.h) calls Pace(raw bytes) and then Admit(wire bytes)
// before each chunk goes on the wire; chunks found unchanged are booked
// with Skip() so the schedule covers the whole save.
//
// Thread-safety: thread-safe. Marks never block.
#ifndef STAGGER_CLIENT_SHAPING_H_
#define STAGGER_CLIENT_SHAPING_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>

#include "qos/clock.h"
#include "qos/collective_gate.h"
#include "qos/pacer.h"
#include "qos/shaper.h"
#include "qos/token_bucket.h"
#include "stagger/options.h"
#include "stagger/status.h"

namespace stagger::client {

// Counters of one save, from Shaping::Mark() to Shaping::Since().
struct ShapingStats {
  double yield_s = 0;
  double paced_rate_Bps = 0;  // 0: not paced
  uint64_t windows = 0;
  double deadline_s = 0;   // of the save last started; 0: none
  double cpu_yield_s = 0;  // encoders paused for collectives (AwaitCpu)
};

// Moves the calling thread to the lowest CPU and I/O priority the
// platform gives (qos::LowerThisThread) and, the first time in the process
// that SCHED_IDLE is refused, logs what the thread got instead.
void LowerBackgroundThread();

class Shaping {
 public:
  // INVALID_ARGUMENT naming the option when one is out of range;
  // the node bucket's file errors as they come. `clock` (not owned;
  // CheckpointerOptions::clock) for tests; nullptr: the real clock.
  static Result<std::unique_ptr<Shaping>> Make(const CheckpointerOptions& o,
                                               qos::Clock* clock = nullptr);
  // The option checks of Make alone (no files opened), so that bad options
  // are refused before anything starts.
  static Status Validate(const CheckpointerOptions& o);

  // A save of `raw_bytes` starts now, with `deadline_s` (<= 0: none). The
  // pacer sends over this rank's stagger slot of the deadline, ending 10%
  // of the slot early so the last writes and the commit fit before it.
  void StartSave(uint64_t raw_bytes, double deadline_s);
  // Blocks until `raw_bytes` of the save may go (pacing and stagger).
  Status Pace(uint64_t raw_bytes);
  // Books chunks that will not be sent (unchanged), without waiting.
  void Skip(uint64_t raw_bytes);
  // Blocks until `wire_bytes` may go (caps and the collective gate). While
  // a caller waits (CallerWaits) only an open collective holds the bytes
  // back (qos::Shaper::SetUrgent).
  Status Admit(uint64_t wire_bytes);
  // A caller blocks until the saves in flight finish (true), or no longer
  // does (false); calls nest. Training is stalled meanwhile, so the
  // collectives the gate predicts will not come: only an open one holds
  // bytes back. A save merely past its deadline keeps to the predicted
  // windows: nobody waits for it yet.
  void CallerWaits(bool waiting);
  int callers_waiting() const {
    return callers_waiting_.load(std::memory_order_relaxed);
  }
  // The link's throughput, so chunks are fitted into idle windows.
  void SetLinkRateHint(double Bps);
  // Whether `bytes` put on the wire now would drain before the collective
  // gate's current idle window closes (true without a gate, a prediction
  // or a link rate, and while a caller waits).
  bool FitsWindow(uint64_t bytes) const;

  // The client's work after the stall runs at idle CPU priority
  // (CheckpointerOptions::background_cpu is kIdle).
  bool LowPriority() const {
    return options_.background_cpu == BackgroundCpu::kIdle;
  }
  // Before a chunk's CPU work (fingerprint, encode): with LowPriority and
  // a collective gate, blocks while the gate holds network sends back (a
  // marked collective runs, or one is predicted), as the sender does; while
  // a caller waits (CallerWaits), only while a marked collective is open.
  // OK at once otherwise; CANCELLED after Cancel().
  Status AwaitCpu();

  void CollectiveBegin();
  void CollectiveEnd();
  void IterationBegin();

  // The save last started has a deadline (it is paced).
  bool Paced() const { return deadline_s_.load() > 0; }
  // The raw bytes/s the pacer last asked for (0: not paced or unknown).
  double PaceBps() const;
  // The training loop has marked a collective (with any qos_yield): the
  // network is shared with the job.
  bool TrainingMarked() const { return collectives_marked_.load() > 0; }

  // Cumulative counters; a save subtracts the values at its start.
  struct Mark {
    int64_t yield_ns = 0;
    uint64_t windows = 0;
    int64_t cpu_yield_ns = 0;
  };
  Mark Now() const;
  ShapingStats Since(const Mark& start) const;

  // The collective gate's state (all zero with qos_yield "off").
  qos::CollectiveGateStats GateStats() const;

  // Makes waiting calls return CANCELLED (shutdown).
  void Cancel();

 private:
  Shaping() = default;
  qos::Clock* clock_ = nullptr;
  CheckpointerOptions options_;
  // This rank's stagger slot, as shares of the save's deadline.
  double slot_start_ = 0, slot_end_ = 1;
  qos::DeadlinePacer pacer_;
  std::unique_ptr<qos::CollectiveGate> gate_;
  std::unique_ptr<qos::TokenBucket> client_bucket_;
  std::unique_ptr<qos::TokenBucket> node_bucket_;
  std::unique_ptr<qos::Shaper> pace_;
  std::unique_ptr<qos::Shaper> wire_;
  std::atomic<double> link_Bps_{0};
  std::atomic<double> deadline_s_{0};
  std::atomic<int> callers_waiting_{0};
  std::atomic<uint64_t> collectives_marked_{0};
  std::atomic<int64_t> cpu_yield_ns_{0};
  std::atomic<bool> cancelled_{false};
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_SHAPING_H_
