#include "qos/collective_gate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace stagger::qos {
namespace {

using qos_internal::FloorDiv;
using qos_internal::GateModel;

constexpr int64_t kForever = std::numeric_limits<int64_t>::max();
// Completed spans kept in any mode, whatever the marks say.
constexpr size_t kMaxSpans = 4096;

CollectiveGateOptions Clamp(CollectiveGateOptions o) {
  o.learn_iterations = std::max(o.learn_iterations, 1);
  o.guard_ns = std::max<int64_t>(o.guard_ns, 0);
  if (!(o.guard_fraction >= 0)) o.guard_fraction = 0;
  o.guard_fraction = std::min(o.guard_fraction, 0.99);
  if (!(o.floor_Bps >= 0) || !std::isfinite(o.floor_Bps)) o.floor_Bps = 0;
  if (!(o.tolerance > 0)) o.tolerance = 0.01;
  o.tolerance = std::min(o.tolerance, 0.99);
  o.mismatch_limit = std::max(o.mismatch_limit, 1);
  o.max_phases = std::max(o.max_phases, 1);
  o.quiet_periods = std::max(o.quiet_periods, 1);
  o.quiet_timeout_ns = std::max<int64_t>(o.quiet_timeout_ns, 1);
  return o;
}

}  // namespace

Status CollectiveGateOptions::Validate() const {
  auto bad = [](absl::string_view field) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective gate: ", field, " out of range"));
  };
  if (learn_iterations < 1) return bad("learn_iterations");
  if (guard_ns < 0) return bad("guard_ns");
  if (!(guard_fraction >= 0 && guard_fraction < 1))
    return bad("guard_fraction");
  if (!(floor_Bps >= 0) || !std::isfinite(floor_Bps)) return bad("floor_Bps");
  if (!(tolerance > 0 && tolerance < 1)) return bad("tolerance");
  if (mismatch_limit < 1) return bad("mismatch_limit");
  if (max_phases < 1) return bad("max_phases");
  if (quiet_periods < 1) return bad("quiet_periods");
  if (quiet_timeout_ns < 1) return bad("quiet_timeout_ns");
  return absl::OkStatus();
}

CollectiveGate::CollectiveGate(CollectiveGateOptions options)
    : options_(Clamp(options)) {}

int64_t CollectiveGate::QuietDeadlineLocked() const {
  const int64_t quiet = learned_ ? options_.quiet_periods * model_.period_ns
                                 : options_.quiet_timeout_ns;
  return last_mark_ns_ > kForever - quiet ? kForever : last_mark_ns_ + quiet;
}

bool CollectiveGate::StaleLocked(int64_t now_ns) const {
  return !any_mark_ || now_ns > QuietDeadlineLocked();
}

int64_t CollectiveGate::TouchLocked(int64_t now_ns) {
  if (any_mark_) {
    now_ns = std::max(now_ns, last_mark_ns_);
    if (StaleLocked(now_ns)) ResetLocked();
  }
  any_mark_ = true;
  last_mark_ns_ = now_ns;
  return now_ns;
}

void CollectiveGate::ResetLocked() {
  if (learned_) ++stats_.models_dropped;
  learned_ = false;
  released_ = false;
  mismatches_ = 0;
  marks_mode_ = false;
  marks_.clear();
  spans_.clear();
  active_ = 0;
}

void CollectiveGate::DropModelLocked() {
  ++stats_.models_dropped;
  learned_ = false;
  released_ = false;
  matched_busy_ = false;
  mismatches_ = 0;
  // Relearn from what follows: the current iteration with marks, the span
  // that broke the pattern without.
  if (marks_mode_) {
    if (marks_.size() > 1) marks_.erase(marks_.begin(), marks_.end() - 1);
    while (!spans_.empty() && !marks_.empty() &&
           spans_.front().begin_ns < marks_.front()) {
      spans_.pop_front();
    }
  } else if (spans_.size() > 1) {
    spans_.erase(spans_.begin(), spans_.end() - 1);
  }
}

void CollectiveGate::AdoptLocked(const GateModel& model, int64_t origin_ns) {
  const int64_t guard =
      std::max(options_.guard_ns,
               static_cast<int64_t>(options_.guard_fraction * model.period_ns));
  const int64_t max_idle = qos_internal::MaxIdleWindowNs(model, guard);
  // A pattern that leaves no idle time is no use: keep the fallback.
  if (max_idle <= 0) return;
  learned_ = true;
  model_ = model;
  origin_ns_ = origin_ns;
  guard_ns_ = guard;
  tol_ns_ = static_cast<int64_t>(options_.tolerance * model.period_ns);
  max_idle_ns_ = max_idle;
  mismatches_ = 0;
  released_ = false;
  matched_busy_ = false;
  iteration_bad_ = false;
  ++stats_.models_learned;
}

void CollectiveGate::TryLearnLocked() {
  if (!options_.learn) return;
  const int n = options_.learn_iterations;
  if (marks_mode_) {
    if (marks_.size() < static_cast<size_t>(n) + 1) return;
    // A collective still open began in the last iteration: wait for its end.
    if (active_ > 0 && busy_begin_ns_ < marks_.back()) return;
    std::optional<GateModel> model = qos_internal::FitIterations(
        qos_internal::SplitByMarks(marks_, spans_), options_.tolerance);
    if (!model.has_value()) return;
    AdoptLocked(*model, marks_.back());
    if (!learned_) return;
    // Spans already seen in the current iteration (when learning at a
    // CollectiveEnd) count as matched.
    size_t seen = 0;
    for (const Span& s : spans_) seen += s.begin_ns >= marks_.back();
    expected_phase_ = seen % model_.phases.size();
    matched_in_iteration_ = seen;
    return;
  }
  std::optional<GateModel> model = qos_internal::FitRecurrence(
      spans_, n, options_.max_phases, options_.tolerance);
  if (!model.has_value()) return;
  AdoptLocked(*model, spans_.back().begin_ns);
  expected_phase_ = 1 % model_.phases.size();
}

void CollectiveGate::IterationBegin(int64_t now_ns) {
  absl::MutexLock lock(&mu_);
  now_ns = TouchLocked(now_ns);
  if (!marks_mode_) {
    // Spans before the first mark belong to no iteration; a model found
    // without marks is anchored differently.
    if (learned_) DropModelLocked();
    marks_mode_ = true;
    marks_.clear();
    spans_.clear();
  }
  if (learned_) {
    // An iteration shorter than learned, or with other collectives, breaks
    // the model: its windows would close too late. A longer one (its
    // collectives slowed, e.g. by other traffic) does not: the next
    // iteration is anchored at its actual mark, so the windows only close
    // early. Only a lasting slowdown makes it relearn.
    const int64_t length = now_ns - origin_ns_;
    const bool longer = length > model_.period_ns + tol_ns_;
    bool bad = iteration_bad_ || length < model_.period_ns - tol_ns_;
    if (matched_in_iteration_ != model_.phases.size()) bad = true;
    mismatches_ = bad ? mismatches_ + 1 : 0;
    long_iterations_ = longer && !bad ? long_iterations_ + 1 : 0;
    if (long_iterations_ >= kLongIterationsToRelearn) {
      long_iterations_ = 0;
      mismatches_ = options_.mismatch_limit;
    }
    origin_ns_ = now_ns;
    expected_phase_ = 0;
    matched_in_iteration_ = 0;
    iteration_bad_ = false;
    if (mismatches_ >= options_.mismatch_limit) DropModelLocked();
  }
  marks_.push_back(now_ns);
  while (marks_.size() > static_cast<size_t>(options_.learn_iterations) + 1) {
    marks_.pop_front();
  }
  while (!spans_.empty() && spans_.front().begin_ns < marks_.front()) {
    spans_.pop_front();
  }
  if (!learned_) TryLearnLocked();
}

void CollectiveGate::CollectiveBegin(int64_t now_ns) {
  absl::MutexLock lock(&mu_);
  now_ns = TouchLocked(now_ns);
  ++stats_.collectives;
  if (active_++ > 0) return;
  busy_begin_ns_ = now_ns;
  // Matched on its begin, so that a collective still running at the next
  // IterationBegin counts for the iteration it began in.
  if (learned_) MatchBeginLocked(now_ns);
}

void CollectiveGate::CollectiveEnd(int64_t now_ns) {
  absl::MutexLock lock(&mu_);
  now_ns = TouchLocked(now_ns);
  if (active_ == 0 || --active_ > 0) return;
  const Span span{busy_begin_ns_, now_ns};
  spans_.push_back(span);
  const size_t keep = marks_mode_
                          ? kMaxSpans
                          : static_cast<size_t>(options_.learn_iterations) *
                                    options_.max_phases +
                                1;
  while (spans_.size() > std::min(keep, kMaxSpans)) spans_.pop_front();
  if (learned_) {
    MatchEndLocked(now_ns);
  } else {
    TryLearnLocked();
  }
}

void CollectiveGate::MismatchLocked() {
  if (marks_mode_) {
    iteration_bad_ = true;  // Judged at the next IterationBegin.
    return;
  }
  if (++mismatches_ >= options_.mismatch_limit) DropModelLocked();
}

void CollectiveGate::MatchBeginLocked(int64_t begin_ns) {
  matched_busy_ = false;
  const int64_t period = model_.period_ns;
  const int64_t m0 = FloorDiv(begin_ns - origin_ns_, period);
  int64_t best_dist = kForever;
  int64_t best_m = 0;
  size_t best_q = 0;
  for (int64_t m = m0 - 1; m <= m0 + 1; ++m) {
    for (size_t q = 0; q < model_.phases.size(); ++q) {
      const int64_t dist = std::llabs(
          begin_ns - (origin_ns_ + m * period + model_.phases[q].begin_ns));
      if (dist < best_dist) {
        best_dist = dist;
        best_m = m;
        best_q = q;
      }
    }
  }
  if (best_dist > tol_ns_) {
    MismatchLocked();
    return;
  }
  const size_t expected = expected_phase_;
  expected_phase_ = (best_q + 1) % model_.phases.size();
  if (best_q != expected) {
    MismatchLocked();  // A phase was skipped; resynchronised above.
    return;
  }
  ++matched_in_iteration_;
  const Span& phase = model_.phases[best_q];
  if (!marks_mode_) {
    mismatches_ = 0;
    // Without marks, phase 0 anchors the iteration so errors do not add up.
    if (best_q == 0) {
      origin_ns_ = begin_ns - phase.begin_ns;
      best_m = 0;
    }
  }
  matched_busy_ = true;
  matched_end_ns_ = origin_ns_ + best_m * period + phase.end_ns;
}

void CollectiveGate::MatchEndLocked(int64_t end_ns) {
  if (!matched_busy_) return;
  matched_busy_ = false;
  if (end_ns > matched_end_ns_ + tol_ns_) {
    // With marks, a collective that runs long kept the gate closed while
    // it ran: no harm done (the iteration's length is judged at its end).
    if (!marks_mode_) MismatchLocked();
  } else if (end_ns < matched_end_ns_) {
    released_ = true;
    released_from_ns_ = end_ns;
    released_until_ns_ = matched_end_ns_;
  }
}

std::vector<qos_internal::Span> CollectiveGate::ClosedLocked(
    int64_t now_ns) const {
  std::vector<Span> closed;
  const int64_t period = model_.period_ns;
  const int64_t m0 = FloorDiv(now_ns - origin_ns_, period);
  for (int64_t m = m0 - 1; m <= m0 + 2; ++m) {
    for (const Span& p : model_.phases) {
      const Span w{origin_ns_ + m * period + p.begin_ns - guard_ns_,
                   origin_ns_ + m * period + p.end_ns};
      // Re-anchoring may have moved the released window by up to tol_ns_.
      if (released_ && w.begin_ns <= released_from_ns_ &&
          std::llabs(w.end_ns - released_until_ns_) <= tol_ns_) {
        continue;
      }
      closed.push_back(w);
    }
  }
  std::sort(closed.begin(), closed.end(), [](const Span& a, const Span& b) {
    return a.begin_ns < b.begin_ns;
  });
  return closed;
}

int64_t CollectiveGate::NextExpectedBeginLocked() const {
  // The earliest predicted begin after the last collective's own (which
  // matched a prediction within tol_ns_); with marks, in the current
  // iteration or later (each iteration is anchored at its own mark, so a
  // window before it was never expected).
  int64_t after = busy_begin_ns_ + tol_ns_;
  if (marks_mode_) after = std::max(after, origin_ns_ - 1);
  const int64_t period = model_.period_ns;
  const int64_t m0 = FloorDiv(after - origin_ns_, period);
  int64_t next = kForever;
  for (int64_t m = m0 - 1; m <= m0 + 1; ++m) {
    for (const Span& p : model_.phases) {
      const int64_t b = origin_ns_ + m * period + p.begin_ns;
      if (b > after) next = std::min(next, b);
    }
  }
  return next;
}

bool CollectiveGate::OverdueLocked(int64_t now_ns) const {
  if (!learned_ || active_ > 0) return false;
  const int64_t next = NextExpectedBeginLocked();
  return next != kForever && now_ns >= next - guard_ns_;
}

bool CollectiveGate::MaySendLocked(int64_t now_ns) const {
  if (StaleLocked(now_ns)) return true;
  if (active_ > 0) return false;
  if (!learned_) return true;
  if (OverdueLocked(now_ns)) return false;
  for (const Span& w : ClosedLocked(now_ns)) {
    if (w.begin_ns <= now_ns && now_ns < w.end_ns) return false;
  }
  return true;
}

bool CollectiveGate::CollectiveOpen(int64_t now_ns) const {
  absl::MutexLock lock(&mu_);
  return !StaleLocked(now_ns) && active_ > 0;
}

bool CollectiveGate::MaySend(int64_t now_ns) const {
  absl::MutexLock lock(&mu_);
  return MaySendLocked(now_ns);
}

int64_t CollectiveGate::NextOpenNs(int64_t now_ns) const {
  absl::MutexLock lock(&mu_);
  if (MaySendLocked(now_ns)) return now_ns;
  const int64_t quiet_deadline = QuietDeadlineLocked();
  // Overdue: it opens once the expected collective has come and gone (or
  // by the quiet rule); waiters re-check.
  if (!learned_ || OverdueLocked(now_ns)) return quiet_deadline;
  int64_t t = now_ns;
  for (const Span& w : ClosedLocked(now_ns)) {  // Sorted by begin.
    if (w.begin_ns <= t && t < w.end_ns) t = w.end_ns;
  }
  if (active_ > 0 && t == now_ns) return quiet_deadline;
  return std::min(t, quiet_deadline);
}

int64_t CollectiveGate::OpenUntilLocked(int64_t now_ns) const {
  if (!MaySendLocked(now_ns)) return now_ns;
  if (!learned_ || StaleLocked(now_ns)) return kForever;
  for (const Span& w : ClosedLocked(now_ns)) {
    if (w.begin_ns > now_ns) return w.begin_ns;
  }
  return kForever;
}

int64_t CollectiveGate::OpenUntilNs(int64_t now_ns) const {
  absl::MutexLock lock(&mu_);
  return OpenUntilLocked(now_ns);
}

int64_t CollectiveGate::MaxIdleWindowNs(int64_t now_ns) const {
  absl::MutexLock lock(&mu_);
  if (!learned_ || StaleLocked(now_ns)) return kForever;
  return max_idle_ns_;
}

bool CollectiveGate::RecordSend(int64_t now_ns) {
  absl::MutexLock lock(&mu_);
  if (!MaySendLocked(now_ns)) return false;
  const bool fresh = !sent_ || send_collectives_ != stats_.collectives ||
                     now_ns >= send_window_end_ns_;
  sent_ = true;
  send_collectives_ = stats_.collectives;
  send_window_end_ns_ = OpenUntilLocked(now_ns);
  if (fresh) ++stats_.windows;
  return fresh;
}

void CollectiveGate::AddYieldNs(int64_t ns) {
  absl::MutexLock lock(&mu_);
  stats_.yield_ns += ns;
}

CollectiveGateStats CollectiveGate::stats() const {
  absl::MutexLock lock(&mu_);
  CollectiveGateStats s = stats_;
  s.learned = learned_;
  s.period_ns = learned_ ? model_.period_ns : 0;
  return s;
}

}  // namespace stagger::qos
