// Helpers every benchmark driver shares: command-line flags, byte sizes,
// timing, the printed table, the RESULT line, the --json report and
// temporary directories. Rules the drivers follow: docs/benchmarks.md.
//
// Thread-safety: none of these types is thread-safe; drivers use them from
// their main thread.
#ifndef STAGGER_BENCH_COMMON_H_
#define STAGGER_BENCH_COMMON_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/cli/synthetic_state.h"
#include "stagger/checkpointer.h"
#include "stagger/status.h"

namespace stagger::bench {

// "2GiB", "64MiB", "512KiB", "1G", "4096": binary multiples for K/M/G/T with
// or without "iB"; "KB"/"MB"/"GB"/"TB" are decimal. INVALID_ARGUMENT naming
// the text otherwise, or for zero.
Result<uint64_t> ParseSize(const std::string& text);
// 1.50 GiB, 32.0 MiB, 512 B.
std::string FormatBytes(uint64_t bytes);

// Flags of the form --name VALUE, --name=VALUE or a bare --name (value
// "true"). Parse() rejects names not declared.
class Flags {
 public:
  // `known`: name -> {default, help}. --help is always known.
  using Spec = std::map<std::string, std::pair<std::string, std::string>>;
  Flags(std::string program, Spec known);
  // INVALID_ARGUMENT naming the flag for an unknown name or a missing value.
  Status Parse(int argc, char** argv);
  bool help() const { return help_; }
  void PrintUsage() const;

  std::string Get(const std::string& name) const;
  Result<uint64_t> GetSize(const std::string& name) const;
  Result<int> GetInt(const std::string& name) const;
  // A finite number of seconds >= 0; INVALID_ARGUMENT naming the flag.
  Result<double> GetSeconds(const std::string& name) const;

 private:
  std::string program_;
  Spec known_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

using Clock = std::chrono::steady_clock;
inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
double Median(std::vector<double> values);  // 0 when empty
double Min(const std::vector<double>& values);

// A table printed with aligned columns.
// a / b; 0 for 0/0, +infinity for a/0.
double Div(double a, double b);
// Div(a, b) with two decimals; "-" for 0/0, "inf" for a/0.
std::string Ratio(double a, double b);

class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void AddRow(std::vector<std::string> cells);
  void Print() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// "%.4f"-style formatting of seconds / rates / ratios for tables.
std::string Fixed(double value, int decimals);

// The figures of the RESULT line, in order. Print() writes
// "RESULT <name> k=v ... ratio=v" (ratio last); values use %.6g.
class ResultLine {
 public:
  explicit ResultLine(std::string name) : name_(std::move(name)) {}
  void Add(const std::string& key, double value);
  void Print(double ratio) const;
  const std::vector<std::pair<std::string, double>>& figures() const {
    return figures_;
  }

 private:
  std::string name_;
  std::vector<std::pair<std::string, double>> figures_;
};

// A flat JSON document built in insertion order: numbers, strings,
// booleans and a list of row objects. Written by WriteJson.
class JsonReport {
 public:
  void Set(const std::string& key, double value);
  void Set(const std::string& key, const std::string& value);
  void SetBool(const std::string& key, bool value);
  // Appends one object to "rows" (key/value pairs rendered as strings,
  // numbers when they parse as numbers).
  void AddRow(std::vector<std::pair<std::string, std::string>> fields);
  // Writes the document to `path`; "" is a no-op. UNAVAILABLE on I/O errors.
  Status Write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;  // rendered
  std::vector<std::string> rows_;                            // rendered
};

// A directory made with mkdtemp under `parent` (e.g. "/tmp") and removed,
// with everything in it, when destroyed.
class TempDir {
 public:
  static Result<std::unique_ptr<TempDir>> Make(const std::string& parent,
                                               const std::string& prefix);
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// The directory holding this executable (from /proc/self/exe), or
// $STAGGER_BIN_DIR when set.
std::string BinDir();

// Registers every tensor of `state` with `ck`.
Status RegisterState(client::SyntheticState& state, Checkpointer& ck);

// Prints "bench_<name>: <status>" to stderr and returns 1 (the exit code).
int Fail(const std::string& name, const Status& status);

}  // namespace stagger::bench

#endif  // STAGGER_BENCH_COMMON_H_
