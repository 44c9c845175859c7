#include "bench/common.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "util/json.h"

namespace stagger::bench {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// A cell that reads fully as a number is written as one.
std::string JsonValue(const std::string& cell) {
  if (cell.empty()) return "\"\"";
  char* end = nullptr;
  double v = strtod(cell.c_str(), &end);
  if (end != nullptr && *end == '\0' && std::isfinite(v)) return cell;
  return JsonQuote(cell);
}

}  // namespace

Result<uint64_t> ParseSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(text[i]) || text[i] == '.')) ++i;
  std::string number = text.substr(0, i);
  std::string unit = Lower(text.substr(i));
  char* end = nullptr;
  double value = number.empty() ? 0 : strtod(number.c_str(), &end);
  double mult = 0;
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else {
    static const char kUnits[] = "kmgt";
    const char* p = strchr(kUnits, unit[0]);
    std::string rest = unit.substr(1);
    if (p != nullptr && (rest.empty() || rest == "ib" || rest == "b")) {
      double base = rest == "b" ? 1000.0 : 1024.0;
      mult = std::pow(base, 1 + (p - kUnits));
    }
  }
  if (number.empty() || end == nullptr || *end != '\0' || mult == 0 ||
      value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad size \"", text, "\" (want e.g. 64MiB, 2GiB, 1G, 4096)"));
  }
  return static_cast<uint64_t>(value * mult);
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, kUnits[u]);
  return buf;
}

Flags::Flags(std::string program, Spec known)
    : program_(std::move(program)), known_(std::move(known)) {
  for (const auto& [name, spec] : known_) values_[name] = spec.first;
}

Status Flags::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\""));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (known_.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      // A flag whose default is "false" is a switch; others take a value.
      if (known_[name].first == "false") {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
    }
    values_[name] = value;
  }
  return absl::OkStatus();
}

void Flags::PrintUsage() const {
  printf("usage: %s [flags]\n", program_.c_str());
  for (const auto& [name, spec] : known_) {
    printf("  --%-18s %s (default: %s)\n", name.c_str(), spec.second.c_str(),
           spec.first.empty() ? "none" : spec.first.c_str());
  }
}

std::string Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? "" : it->second;
}

Result<uint64_t> Flags::GetSize(const std::string& name) const {
  auto size = ParseSize(Get(name));
  if (!size.ok()) return WithContext(size.status(), "--" + name);
  return size;
}

Result<int> Flags::GetInt(const std::string& name) const {
  std::string v = Get(name);
  char* end = nullptr;
  long n = strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1 || n > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": want a positive integer, got \"", v, "\""));
  }
  return static_cast<int>(n);
}

Result<double> Flags::GetSeconds(const std::string& name) const {
  std::string v = Get(name);
  char* end = nullptr;
  double s = strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(s) || s < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, ": want a number of seconds >= 0, got \"", v, "\""));
  }
  return s;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double Min(const std::vector<double>& values) {
  return values.empty() ? 0 : *std::min_element(values.begin(), values.end());
}

Table::Table(std::vector<std::string> header) {
  rows_.push_back(std::move(header));
}

void Table::AddRow(std::vector<std::string> cells) {
  rows_.push_back(std::move(cells));
}

void Table::Print() const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  for (size_t r = 0; r < rows_.size(); ++r) {
    std::string line;
    for (size_t i = 0; i < rows_[r].size(); ++i) {
      std::string cell = rows_[r][i];
      // First column left-aligned, figures right-aligned.
      std::string pad(width[i] - cell.size(), ' ');
      line += i == 0 ? cell + pad : pad + cell;
      if (i + 1 < rows_[r].size()) line += "  ";
    }
    printf("%s\n", line.c_str());
    if (r == 0) printf("%s\n", std::string(line.size(), '-').c_str());
  }
}

std::string Fixed(double value, int decimals) {
  if (!std::isfinite(value)) return "-";
  char buf[48];
  snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  return buf;
}

void ResultLine::Add(const std::string& key, double value) {
  figures_.emplace_back(key, value);
}

void ResultLine::Print(double ratio) const {
  std::string line = "RESULT " + name_;
  char buf[64];
  for (const auto& [key, value] : figures_) {
    snprintf(buf, sizeof(buf), " %s=%.6g", key.c_str(), value);
    line += buf;
  }
  snprintf(buf, sizeof(buf), " ratio=%.6g", ratio);
  printf("%s%s\n", line.c_str(), buf);
  fflush(stdout);
}

void JsonReport::Set(const std::string& key, double value) {
  fields_.emplace_back(key, JsonNumber(value));
}

void JsonReport::Set(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, JsonQuote(value));
}

void JsonReport::SetBool(const std::string& key, bool value) {
  fields_.emplace_back(key, value ? "true" : "false");
}

void JsonReport::AddRow(
    std::vector<std::pair<std::string, std::string>> fields) {
  std::string row = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) row += ", ";
    row += JsonQuote(fields[i].first) + ": " + JsonValue(fields[i].second);
  }
  rows_.push_back(row + "}");
}

Status JsonReport::Write(const std::string& path) const {
  if (path.empty()) return absl::OkStatus();
  std::string doc = "{\n";
  for (const auto& [key, value] : fields_) {
    doc += "  " + JsonQuote(key) + ": " + value + ",\n";
  }
  doc += "  \"rows\": [";
  for (size_t i = 0; i < rows_.size(); ++i) {
    doc += (i == 0 ? "\n    " : ",\n    ") + rows_[i];
  }
  doc += rows_.empty() ? "]\n}\n" : "\n  ]\n}\n";
  std::ofstream out(path, std::ios::trunc);
  out << doc;
  out.close();
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<TempDir>> TempDir::Make(const std::string& parent,
                                               const std::string& prefix) {
  std::string tmpl = parent + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create a directory under ", parent, ": ", strerror(errno)));
  }
  return std::unique_ptr<TempDir>(new TempDir(buf.data()));
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // best effort: it is scratch
}

std::string BinDir() {
  const char* env = getenv("STAGGER_BIN_DIR");
  if (env != nullptr && *env != '\0') return env;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

Status RegisterState(client::SyntheticState& state, Checkpointer& ck) {
  for (client::SyntheticTensor& t : state.tensors()) {
    STAGGER_RETURN_IF_ERROR(
        ck.Register({t.name, t.dtype, t.shape, t.bytes.data()}));
  }
  return absl::OkStatus();
}

int Fail(const std::string& name, const Status& status) {
  fprintf(stderr, "bench_%s: %s\n", name.c_str(),
          std::string(status.ToString()).c_str());
  return 1;
}

double Div(double a, double b) {
  if (b == 0) return a == 0 ? 0 : std::numeric_limits<double>::infinity();
  return a / b;
}

std::string Ratio(double a, double b) {
  if (a == 0 && b == 0) return "-";
  double r = Div(a, b);
  return std::isinf(r) ? "inf" : Fixed(r, 2);
}

}  // namespace stagger::bench
