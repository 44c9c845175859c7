#include "metrics/text_format.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace stagger::metrics {
namespace {

// Label values escape backslash, double quote and newline; HELP text only
// backslash and newline.
std::string Escape(const std::string& v, bool quotes = true) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void TextWriter::Family(const std::string& name, const std::string& help,
                        const char* type) {
  if (!families_.insert(name).second) return;
  absl::StrAppend(&out_, "# HELP ", name, " ", Escape(help, /*quotes=*/false),
                  "\n", "# TYPE ", name, " ", type, "\n");
}

void TextWriter::Sample(const std::string& name, const Labels& labels,
                        double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      absl::StrAppend(&out_, labels[i].first, "=\"", Escape(labels[i].second),
                      "\"");
    }
    out_ += '}';
  }
  absl::StrAppend(&out_, " ", FormatValue(value), "\n");
}

void TextWriter::Counter(const std::string& name, const std::string& help,
                         double value, const Labels& labels) {
  Family(name, help, "counter");
  Sample(name, labels, value);
}

void TextWriter::Gauge(const std::string& name, const std::string& help,
                       double value, const Labels& labels) {
  Family(name, help, "gauge");
  Sample(name, labels, value);
}

void TextWriter::Histogram(const std::string& name, const std::string& help,
                           const Histogram::Snapshot& h, const Labels& labels) {
  Family(name, help, "histogram");
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    Labels l = labels;
    l.emplace_back("le", FormatValue(h.bounds[i]));
    Sample(name + "_bucket", l, static_cast<double>(h.cumulative[i]));
  }
  Labels inf = labels;
  inf.emplace_back("le", "+Inf");
  Sample(name + "_bucket", inf, static_cast<double>(h.count));
  Sample(name + "_sum", labels, h.sum);
  Sample(name + "_count", labels, static_cast<double>(h.count));
}

Result<double> SampleValue(const std::string& page, const std::string& name,
                           const std::string& labels) {
  const std::string key =
      labels.empty() ? name : absl::StrCat(name, "{", labels, "}");
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        line[key.size()] == ' ') {
      double v = 0;
      if (absl::SimpleAtod(line.substr(key.size() + 1), &v)) return v;
      return absl::InvalidArgumentError(
          absl::StrCat("metrics sample ", key, ": not a number: ", line));
    }
  }
  return absl::NotFoundError(absl::StrCat("metrics page has no sample ", key));
}

}  // namespace stagger::metrics
