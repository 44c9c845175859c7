// TextWriter: builds a page in the Prometheus text exposition format
// (version 0.0.4): one "# HELP" and "# TYPE" line per metric family, then
// its samples. Names must match [a-zA-Z_:][a-zA-Z0-9_:]*; label values are
// escaped (backslash, double quote, newline).
//
// Thread-safety: one writer per thread.
#ifndef STAGGER_METRICS_TEXT_FORMAT_H_
#define STAGGER_METRICS_TEXT_FORMAT_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "metrics/histogram.h"
#include "stagger/status.h"

namespace stagger::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class TextWriter {
 public:
  void Counter(const std::string& name, const std::string& help, double value,
               const Labels& labels = {});
  void Gauge(const std::string& name, const std::string& help, double value,
             const Labels& labels = {});
  void Histogram(const std::string& name, const std::string& help,
                 const Histogram::Snapshot& h, const Labels& labels = {});

  const std::string& text() const { return out_; }

 private:
  void Family(const std::string& name, const std::string& help,
              const char* type);
  void Sample(const std::string& name, const Labels& labels, double value);

  std::string out_;
  std::set<std::string> families_;
};

// The value of the sample `name` with exactly `labels` (rendered as on the
// page, e.g. `class="checkpoint"`; "" for none) on a page in this format;
// NOT_FOUND naming the sample when the page has no such line. For tests and
// tools that scrape a metrics page.
Result<double> SampleValue(const std::string& page, const std::string& name,
                           const std::string& labels = "");

// "1.5", "3", "+Inf": a sample value as the format wants it.
std::string FormatValue(double v);

}  // namespace stagger::metrics

#endif  // STAGGER_METRICS_TEXT_FORMAT_H_
