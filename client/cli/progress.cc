#include "client/cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stagger::client {
namespace {

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", b)
                : absl::StrFormat("%.2f %s", b, units[u]);
}

std::string Rate(double per_s, bool bytes) {
  if (!bytes) return absl::StrFormat("%.1f/s", per_s);
  if (per_s >= 1e9) return absl::StrFormat("%.2f GB/s", per_s / 1e9);
  return absl::StrFormat("%.0f MB/s", per_s / 1e6);
}

}  // namespace

Progress::Progress(std::string what, uint64_t total, bool bytes, std::FILE* out,
                   int terminal)
    : what_(std::move(what)),
      total_(total),
      bytes_(bytes),
      out_(out),
      terminal_(terminal < 0 ? ::isatty(::fileno(out)) != 0 : terminal != 0),
      start_(std::chrono::steady_clock::now()),
      thread_([this] { Loop(); }) {}

Progress::~Progress() { Finish(); }

void Progress::Finish() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (finished_) return;
    finished_ = true;
  }
  cv_.notify_all();
  thread_.join();
  Report(/*final=*/true);
}

void Progress::Say(std::FILE* to, const std::string& line) {
  std::lock_guard<std::mutex> l(print_mu_);
  if (terminal_) {
    std::fputs("\r\033[K", out_);
    std::fflush(out_);
  }
  std::fprintf(to, "%s\n", line.c_str());
  std::fflush(to);
}

void Progress::Loop() {
  const auto period = terminal_ ? std::chrono::milliseconds(200)
                                : std::chrono::milliseconds(5000);
  std::unique_lock<std::mutex> l(mu_);
  while (!cv_.wait_for(l, period, [this] { return finished_; })) {
    l.unlock();
    Report(/*final=*/false);
    l.lock();
  }
}

std::string Progress::Line(uint64_t done, double seconds) const {
  const uint64_t total = total_.load();
  const double frac =
      total > 0 ? std::min(1.0, static_cast<double>(done) / total) : 1.0;
  const double rate = seconds > 0 ? done / seconds : 0;
  std::string eta = "-";
  if (rate > 0 && done < total) {
    eta = absl::StrCat(static_cast<int64_t>(std::ceil((total - done) / rate)),
                       "s");
  }
  const std::string amount =
      bytes_ ? absl::StrCat(Bytes(done), " / ", Bytes(total))
             : absl::StrCat(done, " / ", total);
  if (terminal_) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(frac * kWidth);
    return absl::StrFormat(
        "%-8s [%s%s] %3d%%  %s  %s  ETA %s", what_, std::string(filled, '#'),
        std::string(kWidth - filled, '.'), static_cast<int>(frac * 100), amount,
        Rate(rate, bytes_), eta);
  }
  return absl::StrFormat(
      "%s: %s (%d%%), %s, ETA %s", what_, amount, static_cast<int>(frac * 100),
      Rate(rate, bytes_),
      eta == "-" ? eta : eta.substr(0, eta.size() - 1) + " s");
}

void Progress::Report(bool final) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  const std::string line = Line(done_.load(), seconds);
  std::lock_guard<std::mutex> l(print_mu_);
  if (terminal_) {
    std::fprintf(out_, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace stagger::client
