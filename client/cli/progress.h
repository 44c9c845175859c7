// Progress of a long CLI operation (restore, verify, gc) on stderr: on a
// terminal a bar redrawn in place,
//   restore  [#########.........]  48%  1.20 GiB / 2.50 GiB  850 MB/s  ETA 2s
// otherwise (a log, a pipe) a plain line every 5 s,
//   restore: 1.20 GiB of 2.50 GiB (48%), 850 MB/s, ETA 2 s
// and, either way, a last line when it finishes. Units are bytes, or items
// (servers, for gc) when constructed with `bytes = false`.
//
// Thread-safety: Add may be called from any thread.
#ifndef STAGGER_CLIENT_CLI_PROGRESS_H_
#define STAGGER_CLIENT_CLI_PROGRESS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace stagger::client {

class Progress {
 public:
  // `out` (not owned) is stderr unless a test passes another stream;
  // `terminal` < 0 asks isatty(out).
  Progress(std::string what, uint64_t total, bool bytes = true,
           std::FILE* out = stderr, int terminal = -1);
  ~Progress();  // Finish() if not done
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Add(uint64_t n) { done_.fetch_add(n, std::memory_order_relaxed); }
  // When the total is known only once the work is planned.
  void SetTotal(uint64_t total) { total_.store(total); }
  // Stops the reporting thread and prints the final line.
  void Finish();
  // Prints `line` (and a newline) to `to` (stdout for results) without
  // mixing it into the bar: on a terminal the bar's line is cleared first
  // and redrawn at the next report.
  void Say(std::FILE* to, const std::string& line);

  // The text of one report (what the bar or line shows), for tests.
  std::string Line(uint64_t done, double seconds) const;

 private:
  void Loop();
  void Report(bool final);

  const std::string what_;
  std::atomic<uint64_t> total_;
  const bool bytes_;
  std::FILE* const out_;
  const bool terminal_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  std::mutex mu_;
  std::mutex print_mu_;  // one report or Say at a time
  std::condition_variable cv_;
  bool finished_ = false;
  std::thread thread_;
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CLI_PROGRESS_H_
