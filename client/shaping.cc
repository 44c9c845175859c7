#include "client/shaping.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "qos/cpu_share.h"
#include "qos/stagger_schedule.h"
#include "util/log.h"

namespace stagger::client {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
// Share of a rank's slot kept after its paced sending ends (StartSave).
constexpr double kTailShare = 0.1;

Status CheckRate(const char* field, double v) {
  if (std::isfinite(v) && v >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be a finite number >= 0, got ", v));
}

uint32_t RanksPerNode(const CheckpointerOptions& o) {
  if (o.ranks_per_node > 0) return o.ranks_per_node;
  return static_cast<uint32_t>(qos::LocalWorldSize());
}

// A bucket lets one chunk, or 50 ms of its rate, through at once.
uint64_t Burst(double rate, uint64_t chunk_size) {
  return std::max<uint64_t>(chunk_size, static_cast<uint64_t>(rate * 0.05));
}

}  // namespace

void LowerBackgroundThread() {
  const qos::BackgroundPriority got = qos::LowerThisThread();
  static std::atomic<bool> said{false};
  if (got != qos::BackgroundPriority::kIdle && !said.exchange(true)) {
    log::Warning("stagger",
                 absl::StrCat("SCHED_IDLE refused for the checkpoint's "
                              "background threads; they run at ",
                              qos::BackgroundPriorityName(got),
                              " priority and may take CPU time from "
                              "training"));
  }
}

Status Shaping::Validate(const CheckpointerOptions& o) {
  STAGGER_RETURN_IF_ERROR(CheckRate("qos_deadline_s", o.qos_deadline_s));
  STAGGER_RETURN_IF_ERROR(CheckRate("qos_floor_Bps", o.qos_floor_Bps));
  STAGGER_RETURN_IF_ERROR(CheckRate("qos_max_Bps", o.qos_max_Bps));
  STAGGER_RETURN_IF_ERROR(
      CheckRate("qos_yield_floor_Bps", o.qos_yield_floor_Bps));
  STAGGER_RETURN_IF_ERROR(CheckRate("rate_limit_Bps", o.rate_limit_Bps));
  STAGGER_RETURN_IF_ERROR(
      CheckRate("node_rate_limit_Bps", o.node_rate_limit_Bps));
  if (!(o.qos_stagger >= 0 && o.qos_stagger <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("qos_stagger must be in [0, 1], got ", o.qos_stagger));
  }
  if (NameOf(o.qos_yield) == "?") {
    return absl::InvalidArgumentError(absl::StrCat(
        "qos_yield value ", static_cast<int>(o.qos_yield), " unknown"));
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<Shaping>> Shaping::Make(const CheckpointerOptions& o,
                                               qos::Clock* clock) {
  STAGGER_RETURN_IF_ERROR(Validate(o));
  auto s = std::unique_ptr<Shaping>(new Shaping());
  s->clock_ = clock != nullptr ? clock : qos::RealClock::Get();
  s->options_ = o;

  qos::StaggerOptions so;
  so.rank = static_cast<int>(o.rank);
  so.world_size = static_cast<int>(o.world_size);
  so.ranks_per_node = static_cast<int>(RanksPerNode(o));
  so.window_ns = kSecond;  // slots as shares of whatever the deadline is
  so.spread = o.qos_stagger;
  STAGGER_ASSIGN_OR_RETURN(qos::StaggerSlot slot, qos::ComputeStaggerSlot(so));
  s->slot_start_ = static_cast<double>(slot.start_offset_ns) / kSecond;
  s->slot_end_ = static_cast<double>(slot.deadline_offset_ns) / kSecond;

  if (o.qos_yield != QosYield::kOff) {
    // Time held back for collectives is made up in the next idle windows
    // (up to this much of the schedule), so yielding does not by itself
    // push a save past its deadline.
    s->pacer_.set_max_credit_ns(kSecond / 2);
    qos::CollectiveGateOptions go;
    go.learn = o.qos_yield == QosYield::kLearn;
    // Close a little before each predicted collective: timing jitter of the
    // iteration and latency between handing bytes to the transport and
    // their leaving the NIC.
    go.guard_fraction = 0.05;
    go.floor_Bps = o.qos_yield_floor_Bps;
    s->gate_ = std::make_unique<qos::CollectiveGate>(go);
  }
  if (o.rate_limit_Bps > 0) {
    s->client_bucket_ = std::make_unique<qos::TokenBucket>(
        o.rate_limit_Bps, Burst(o.rate_limit_Bps, o.chunk_size));
  }
  if (o.node_rate_limit_Bps > 0) {
    std::string path = o.node_rate_limit_file;
    if (path.empty()) {
      STAGGER_ASSIGN_OR_RETURN(path,
                               qos::SharedTokenBucket::NodePath("default"));
    }
    auto bucket = qos::SharedTokenBucket::Open(
        path, o.node_rate_limit_Bps,
        Burst(o.node_rate_limit_Bps, o.chunk_size));
    if (!bucket.ok()) {
      return WithContext(bucket.status(), "node_rate_limit_file");
    }
    s->node_bucket_ = std::move(*bucket);
  }
  qos::ShaperOptions pace;
  pace.clock = s->clock_;
  pace.pacer = &s->pacer_;
  s->pace_ = std::make_unique<qos::Shaper>(pace);
  qos::ShaperOptions wire;
  wire.clock = s->clock_;
  wire.client_bucket = s->client_bucket_.get();
  wire.node_bucket = s->node_bucket_.get();
  wire.gate = s->gate_.get();
  s->wire_ = std::make_unique<qos::Shaper>(wire);
  return s;
}

void Shaping::StartSave(uint64_t raw_bytes, double deadline_s) {
  const int64_t now = clock_->NowNs();
  deadline_s_ = deadline_s > 0 ? deadline_s : 0;
  if (deadline_s <= 0) {
    pacer_.Start(now, raw_bytes, 0, options_.qos_floor_Bps,
                 options_.qos_max_Bps);
    return;
  }
  // The pacer's last byte leaves kTailShare of the slot before its end:
  // the bytes still queued on the way, the server's write and the commit
  // come after it, and a save paced to leave at the deadline is durable
  // after it.
  const double window_ns = deadline_s * kSecond;
  const double send_end = slot_end_ - kTailShare * (slot_end_ - slot_start_);
  pacer_.Start(now + static_cast<int64_t>(slot_start_ * window_ns), raw_bytes,
               now + static_cast<int64_t>(send_end * window_ns),
               options_.qos_floor_Bps, options_.qos_max_Bps);
}

void Shaping::SetLinkRateHint(double Bps) {
  link_Bps_ = Bps;
  wire_->SetLinkRateHint(Bps);
}

bool Shaping::FitsWindow(uint64_t bytes) const {
  const double rate = link_Bps_;
  if (gate_ == nullptr || rate <= 0 || callers_waiting_.load() > 0) {
    return true;
  }
  const int64_t now = clock_->NowNs();
  const int64_t until = gate_->OpenUntilNs(now);
  if (until == std::numeric_limits<int64_t>::max()) return true;
  return static_cast<double>(bytes) * 1e9 / rate <=
         static_cast<double>(until - now);
}

Status Shaping::Pace(uint64_t raw_bytes) {
  return pace_->Request(raw_bytes, qos::Priority::kCheckpoint);
}

void Shaping::Skip(uint64_t raw_bytes) {
  pacer_.Reserve(clock_->NowNs(), raw_bytes);
}

Status Shaping::Admit(uint64_t wire_bytes) {
  return wire_->Request(wire_bytes, qos::Priority::kCheckpoint);
}

void Shaping::CallerWaits(bool waiting) {
  const int now_waiting = callers_waiting_ += waiting ? 1 : -1;
  wire_->SetUrgent(now_waiting > 0);
}

Status Shaping::AwaitCpu() {
  if (gate_ == nullptr || !LowPriority()) return absl::OkStatus();
  // Re-checked in steps, as qos::Shaper does: marks never wake a waiter.
  constexpr int64_t kStepNs = 1'000'000;
  const int64_t start = clock_->NowNs();
  int64_t now = start;
  for (;;) {
    if (cancelled_.load()) {
      return absl::CancelledError("qos: shaping cancelled");
    }
    const bool hold = callers_waiting_.load() > 0 ? gate_->CollectiveOpen(now)
                                                  : !gate_->MaySend(now);
    if (!hold) break;
    const int64_t open = gate_->NextOpenNs(now);
    clock_->SleepUntilNs(std::min(std::max(open, now + 1), now + kStepNs));
    now = clock_->NowNs();
  }
  cpu_yield_ns_ += now - start;
  return absl::OkStatus();
}

void Shaping::CollectiveBegin() {
  collectives_marked_.fetch_add(1, std::memory_order_relaxed);
  if (gate_) gate_->CollectiveBegin(clock_->NowNs());
}
void Shaping::CollectiveEnd() {
  if (gate_) gate_->CollectiveEnd(clock_->NowNs());
}
void Shaping::IterationBegin() {
  if (gate_) gate_->IterationBegin(clock_->NowNs());
}

Shaping::Mark Shaping::Now() const {
  qos::ShaperStats w = wire_->stats();
  return {w.yield_ns, w.windows, cpu_yield_ns_.load()};
}

double Shaping::PaceBps() const {
  const double rate = pacer_.last_rate_Bps();
  return std::isfinite(rate) && rate > 0 ? rate : 0;
}

ShapingStats Shaping::Since(const Mark& start) const {
  Mark now = Now();
  ShapingStats s;
  s.yield_s = static_cast<double>(now.yield_ns - start.yield_ns) * 1e-9;
  s.windows = now.windows - start.windows;
  s.cpu_yield_s =
      static_cast<double>(now.cpu_yield_ns - start.cpu_yield_ns) * 1e-9;
  double rate = pacer_.last_rate_Bps();
  s.paced_rate_Bps = std::isfinite(rate) ? rate : 0;
  s.deadline_s = deadline_s_;
  return s;
}

qos::CollectiveGateStats Shaping::GateStats() const {
  return gate_ ? gate_->stats() : qos::CollectiveGateStats{};
}

void Shaping::Cancel() {
  cancelled_.store(true);
  pace_->Cancel();
  wire_->Cancel();
}

}  // namespace stagger::client
