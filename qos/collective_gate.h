// CollectiveGate: decides when checkpoint traffic may use the network
// without colliding with the training job's own collectives (docs/design.md
// §6.3; the learned idle windows follow Gemini, SOSP'23).
//
// The training side reports marks: IterationBegin, and CollectiveBegin /
// CollectiveEnd around each collective (they may nest or overlap; the job is
// busy while any is open). Senders ask MaySend / NextOpenNs / OpenUntilNs.
//
// Behaviour, in order of precedence:
//   1. No mark ever, or none for a quiet time (quiet_periods * period once
//      learned, quiet_timeout_ns before): fully open. A collective left open
//      that long is taken as leaked, and the next mark starts afresh.
//   2. A collective is open: closed (a floor rate may still apply, see
//      floor_Bps; the gate only reports it).
//   3. A learned model: closed from (predicted collective start - guard) to
//      the predicted end, or to the actual CollectiveEnd of the collective
//      that matched the prediction, whichever is first. A predicted
//      collective that has not begun by then is late, not skipped: the gate
//      stays closed until a collective begins (or rule 1 opens it), so
//      bytes never go out just before a late one.
//   4. Otherwise open.
//
// Learning. With IterationBegin marks, an iteration runs from one mark to the
// next; without them, the gate looks for the smallest k such that the last
// busy spans repeat every k spans (see internal/gate_model.h). Once the last
// learn_iterations iterations agree within `tolerance` (a share of the
// period), the gate adopts their period and busy phases. Each later busy
// span is checked against the prediction (begin within tolerance of the
// expected phase, end not later than its predicted end + tolerance); with
// marks, each iteration is also checked for its length and span count. After
// mismatch_limit consecutive mismatched spans (without marks) or iterations
// (with marks), the model is dropped and learned again from fresh marks;
// meanwhile the gate closes only during actual collectives. With marks, a
// collective that runs long or an iteration longer than the period is not a
// mismatch: each iteration is anchored at its own mark, so the next
// iteration's windows are predicted early, and the late-collective part of
// rule 3 keeps the gate closed from there until that iteration's collective
// comes. 8 long iterations in a row are a mismatch, so a lasting change of
// timing is learned anew.
//
// Thread-safety: thread-safe; marks and queries may come from any threads.
// Times are passed in (see qos/clock.h); marks whose time is earlier than an
// earlier mark are taken as that mark's time.
#ifndef STAGGER_QOS_COLLECTIVE_GATE_H_
#define STAGGER_QOS_COLLECTIVE_GATE_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "qos/internal/gate_model.h"
#include "stagger/status.h"

namespace stagger::qos {

struct CollectiveGateOptions {
  // Learn busy phases and predict them (rule 3 above); false: closed only
  // while a collective is actually open ("pause" mode).
  bool learn = true;
  // Agreeing iterations needed before predictions start (>= 1).
  int learn_iterations = 3;
  // Margin before a predicted collective start; the guard used is
  // max(guard_ns, guard_fraction * period).
  int64_t guard_ns = 2'000'000;
  double guard_fraction = 0.0;
  // Rate a sender may keep while the gate is closed; 0 = pause completely.
  double floor_Bps = 0.0;
  // Allowed deviation from the learned timing, as a share of the period, in
  // (0, 1).
  double tolerance = 0.1;
  // Consecutive mismatches that drop the model (>= 1).
  int mismatch_limit = 2;
  // Most collectives per iteration looked for without IterationBegin marks.
  int max_phases = 8;
  // Quiet time after which the gate opens fully: quiet_periods periods once
  // learned, quiet_timeout_ns before.
  int quiet_periods = 4;
  int64_t quiet_timeout_ns = 10'000'000'000;

  // INVALID_ARGUMENT naming the first field out of range.
  Status Validate() const;
};

struct CollectiveGateStats {
  // Time senders waited because of the gate (added by AddYieldNs).
  int64_t yield_ns = 0;
  // Idle windows in which something was sent (counted by RecordSend).
  uint64_t windows = 0;
  // Whether a model is held, and its period (0 without one).
  bool learned = false;
  int64_t period_ns = 0;
  uint64_t collectives = 0;
  uint64_t models_learned = 0;
  uint64_t models_dropped = 0;
};

class CollectiveGate {
 public:
  // Out-of-range options are clamped to the nearest valid value; call
  // options.Validate() first to report them.
  explicit CollectiveGate(CollectiveGateOptions options = {});
  CollectiveGate(const CollectiveGate&) = delete;
  CollectiveGate& operator=(const CollectiveGate&) = delete;

  // Marks from the training side.
  void IterationBegin(int64_t now_ns);
  void CollectiveBegin(int64_t now_ns);
  // An End without a matching Begin is ignored.
  void CollectiveEnd(int64_t now_ns);

  // Whether bytes may start now.
  bool MaySend(int64_t now_ns) const;
  // Whether a marked collective is open now (false once the marks went
  // quiet, rule 1): the part of MaySend that predicts nothing.
  bool CollectiveOpen(int64_t now_ns) const;
  // When MaySend is next expected to be true: now_ns if it is; else the
  // predicted end of the current busy window; for a collective running with
  // no predicted end, the time the gate would open by the quiet rule. A
  // CollectiveEnd may open the gate earlier, so waiters re-check.
  int64_t NextOpenNs(int64_t now_ns) const;
  // The end of the current idle window: the next predicted closing; now_ns
  // if closed now; INT64_MAX when nothing is predicted.
  int64_t OpenUntilNs(int64_t now_ns) const;
  // The longest predicted idle window; INT64_MAX when nothing is predicted.
  int64_t MaxIdleWindowNs(int64_t now_ns) const;
  double floor_Bps() const { return options_.floor_Bps; }

  // Accounting by senders (qos::Shaper). RecordSend notes bytes starting at
  // now_ns and returns true when they open a new idle window (the first
  // send since the window began); sends while closed (at the floor rate) are
  // not counted. AddYieldNs adds time a sender waited on the gate.
  bool RecordSend(int64_t now_ns);
  void AddYieldNs(int64_t ns);

  CollectiveGateStats stats() const;
  const CollectiveGateOptions& options() const { return options_; }

 private:
  using Span = qos_internal::Span;

  int64_t TouchLocked(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StaleLocked(int64_t now_ns) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int64_t QuietDeadlineLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void ResetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropModelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TryLearnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdoptLocked(const qos_internal::GateModel& model, int64_t origin_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a busy span against the model: its begin (phase, order), then
  // its end (not too late; an early end releases the window).
  void MatchBeginLocked(int64_t begin_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MatchEndLocked(int64_t end_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MismatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Predicted closed windows around now_ns, sorted by begin, without the one
  // released early by its CollectiveEnd.
  std::vector<Span> ClosedLocked(int64_t now_ns) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The predicted begin of the next collective expected after the last one
  // began; INT64_MAX when none is predicted.
  int64_t NextExpectedBeginLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether that collective is due (its guarded window has begun) but has
  // not begun yet: the gate then stays closed until it does.
  bool OverdueLocked(int64_t now_ns) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool MaySendLocked(int64_t now_ns) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int64_t OpenUntilLocked(int64_t now_ns) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const CollectiveGateOptions options_;
  mutable absl::Mutex mu_;

  // Marks.
  bool any_mark_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_mark_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t busy_begin_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool marks_mode_ ABSL_GUARDED_BY(mu_) = false;  // IterationBegin seen
  std::deque<int64_t> marks_ ABSL_GUARDED_BY(mu_);
  std::deque<Span> spans_ ABSL_GUARDED_BY(mu_);  // completed, absolute

  // The model, valid while learned_.
  bool learned_ ABSL_GUARDED_BY(mu_) = false;
  qos_internal::GateModel model_ ABSL_GUARDED_BY(mu_);
  int64_t origin_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t guard_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tol_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_idle_ns_ ABSL_GUARDED_BY(mu_) = 0;
  size_t expected_phase_ ABSL_GUARDED_BY(mu_) = 0;
  size_t matched_in_iteration_ ABSL_GUARDED_BY(mu_) = 0;
  bool iteration_bad_ ABSL_GUARDED_BY(mu_) = false;
  int mismatches_ ABSL_GUARDED_BY(mu_) = 0;
  // Consecutive iterations longer than the model's period (marks mode);
  // this many in a row make the gate learn the new timing.
  static constexpr int kLongIterationsToRelearn = 8;
  int long_iterations_ ABSL_GUARDED_BY(mu_) = 0;
  // The running busy span matched a phase predicted to end at
  // matched_end_ns_.
  bool matched_busy_ ABSL_GUARDED_BY(mu_) = false;
  int64_t matched_end_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // The predicted window [.., released_until_ns_) whose collective ended at
  // released_from_ns_.
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  int64_t released_from_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t released_until_ns_ ABSL_GUARDED_BY(mu_) = 0;

  // Accounting.
  CollectiveGateStats stats_ ABSL_GUARDED_BY(mu_);
  bool sent_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t send_collectives_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t send_window_end_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stagger::qos

#endif  // STAGGER_QOS_COLLECTIVE_GATE_H_
