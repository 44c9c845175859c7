#include "qos/internal/gate_model.h"

#include <algorithm>
#include <cmath>

namespace stagger::qos_internal {

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && (a < 0)) --q;
  return q;
}

std::optional<GateModel> FitIterations(const std::vector<Iteration>& iters,
                                       double tolerance) {
  if (iters.empty()) return std::nullopt;
  const size_t k = iters.front().busy.size();
  if (k == 0) return std::nullopt;
  double sum = 0;
  for (const Iteration& it : iters) {
    if (it.busy.size() != k || it.length_ns <= 0) return std::nullopt;
    sum += static_cast<double>(it.length_ns);
  }
  const int64_t period = static_cast<int64_t>(
      std::llround(sum / static_cast<double>(iters.size())));
  const int64_t tol = static_cast<int64_t>(tolerance * period);
  for (const Iteration& it : iters) {
    if (std::llabs(it.length_ns - period) > tol) return std::nullopt;
  }
  GateModel model;
  model.period_ns = period;
  for (size_t q = 0; q < k; ++q) {
    Span lo = iters.front().busy[q];
    Span hi = lo;
    for (const Iteration& it : iters) {
      const Span& s = it.busy[q];
      lo.begin_ns = std::min(lo.begin_ns, s.begin_ns);
      hi.begin_ns = std::max(hi.begin_ns, s.begin_ns);
      lo.end_ns = std::min(lo.end_ns, s.end_ns);
      hi.end_ns = std::max(hi.end_ns, s.end_ns);
    }
    if (hi.begin_ns - lo.begin_ns > tol || hi.end_ns - lo.end_ns > tol) {
      return std::nullopt;
    }
    Span phase{lo.begin_ns, hi.end_ns};
    if (phase.begin_ns < 0 || phase.end_ns - phase.begin_ns >= period) {
      return std::nullopt;
    }
    model.phases.push_back(phase);
  }
  return model;
}

std::vector<Iteration> SplitByMarks(const std::deque<int64_t>& marks,
                                    const std::deque<Span>& spans) {
  std::vector<Iteration> iters;
  for (size_t j = 0; j + 1 < marks.size(); ++j) {
    Iteration it;
    it.length_ns = marks[j + 1] - marks[j];
    for (const Span& s : spans) {
      if (s.begin_ns >= marks[j] && s.begin_ns < marks[j + 1]) {
        it.busy.push_back({s.begin_ns - marks[j], s.end_ns - marks[j]});
      }
    }
    iters.push_back(std::move(it));
  }
  return iters;
}

std::optional<GateModel> FitRecurrence(const std::deque<Span>& spans, int n,
                                       int max_phases, double tolerance) {
  const int64_t size = static_cast<int64_t>(spans.size());
  for (int64_t k = 1; k <= max_phases; ++k) {
    if (size < n * k + 1) break;
    const int64_t last = size - 1;
    std::vector<Iteration> iters;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t anchor = last - (n - j) * k;
      const int64_t origin = spans[anchor].begin_ns;
      Iteration it;
      it.length_ns = spans[anchor + k].begin_ns - origin;
      for (int64_t q = 0; q < k; ++q) {
        const Span& s = spans[anchor + q];
        it.busy.push_back({s.begin_ns - origin, s.end_ns - origin});
      }
      iters.push_back(std::move(it));
    }
    std::optional<GateModel> model = FitIterations(iters, tolerance);
    if (model.has_value()) return model;
  }
  return std::nullopt;
}

int64_t MaxIdleWindowNs(const GateModel& model, int64_t guard_ns) {
  // Closed windows of two consecutive periods cover every gap, including
  // the one that wraps from the end of an iteration into the next.
  std::vector<Span> closed;
  for (int64_t m = 0; m < 2; ++m) {
    for (const Span& p : model.phases) {
      closed.push_back({m * model.period_ns + p.begin_ns - guard_ns,
                        m * model.period_ns + p.end_ns});
    }
  }
  std::sort(closed.begin(), closed.end(), [](const Span& a, const Span& b) {
    return a.begin_ns < b.begin_ns;
  });
  int64_t best = 0;
  int64_t covered_until = closed.front().end_ns;
  for (size_t i = 1; i < closed.size(); ++i) {
    best = std::max(best, closed[i].begin_ns - covered_until);
    covered_until = std::max(covered_until, closed[i].end_ns);
  }
  return best;
}

}  // namespace stagger::qos_internal
