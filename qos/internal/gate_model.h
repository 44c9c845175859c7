// The learned shape of a training iteration, and how the collective gate fits
// it from observations. Private to qos/ (see collective_gate.h).
//
// A model is a period P and the busy phases of one iteration as offsets from
// the iteration's start: {begin, end} with 0 <= begin, sorted by begin.
// Observed iterations agree with each other, and a model is fitted, when
//   - every iteration has the same number K >= 1 of busy spans,
//   - every length is within tol = tolerance * P of the mean length P,
//   - for each index q the begins (and the ends) of span q differ by at most
//     tol across iterations,
//   - no phase covers a whole period.
// The fitted phase q is the union [min begin, max end] of the observations,
// so the model errs on the side of predicting a collective.
//
// Pure functions; thread-compatible.
#ifndef STAGGER_QOS_INTERNAL_GATE_MODEL_H_
#define STAGGER_QOS_INTERNAL_GATE_MODEL_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace stagger::qos_internal {

struct Span {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

struct Iteration {
  int64_t length_ns = 0;
  // Busy spans that began in the iteration, as offsets from its start.
  std::vector<Span> busy;
};

struct GateModel {
  int64_t period_ns = 0;
  std::vector<Span> phases;
};

// floor(a / b) for b > 0.
int64_t FloorDiv(int64_t a, int64_t b);

// The model the iterations agree on, or nullopt (see the file comment).
std::optional<GateModel> FitIterations(const std::vector<Iteration>& iters,
                                       double tolerance);

// Iterations delimited by consecutive `marks` (absolute times, ascending):
// iteration j holds the spans that began in [marks[j], marks[j + 1]).
std::vector<Iteration> SplitByMarks(const std::deque<int64_t>& marks,
                                    const std::deque<Span>& spans);

// Without iteration marks: the smallest k in [1, max_phases] for which the
// last n * k + 1 completed spans (absolute, ascending) form n iterations of
// k spans that agree, each iteration starting at the begin of its first
// span. The latest span is phase 0 of the current iteration, so the model's
// origin is spans.back().begin_ns. nullopt when no k fits.
std::optional<GateModel> FitRecurrence(const std::deque<Span>& spans, int n,
                                       int max_phases, double tolerance);

// The longest time between consecutive closed windows
// [origin + m * P + phase.begin - guard, origin + m * P + phase.end) of a
// model, i.e. the longest predicted idle window; <= 0 when the closed windows
// cover the whole period.
int64_t MaxIdleWindowNs(const GateModel& model, int64_t guard_ns);

}  // namespace stagger::qos_internal

#endif  // STAGGER_QOS_INTERNAL_GATE_MODEL_H_
