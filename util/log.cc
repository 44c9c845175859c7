#include "util/log.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace stagger::log {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_level{kUnset};

Level FromEnvironment() {
  const char* env = std::getenv("STAGGER_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return Level::kInfo;
  auto level = ParseLevel(env);
  if (level.ok()) return *level;
  const std::string line =
      Format(Level::kWarning, "stagger",
             absl::StrCat("STAGGER_LOG_LEVEL: ", level.status().message(),
                          "; using info"));
  (void)!::write(2, line.data(), line.size());
  return Level::kInfo;
}

}  // namespace

Result<Level> ParseLevel(std::string_view text) {
  if (text == "debug") return Level::kDebug;
  if (text == "info") return Level::kInfo;
  if (text == "warning" || text == "warn") return Level::kWarning;
  if (text == "error") return Level::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("log level '", AsAbsl(text),
                   "' is not one of debug, info, warning, error"));
}

void SetLevel(Level level) { g_level.store(static_cast<int>(level)); }

namespace {
absl::Mutex g_floor_mu;
std::string* g_floor_component ABSL_GUARDED_BY(g_floor_mu) = nullptr;
std::atomic<int> g_floor{0};
}  // namespace

void SetComponentFloor(std::string_view component, Level floor) {
  absl::MutexLock lock(&g_floor_mu);
  if (g_floor_component == nullptr) g_floor_component = new std::string();
  *g_floor_component = std::string(component);
  g_floor.store(static_cast<int>(floor));
}

bool LevelFromEnvironment() {
  const char* env = std::getenv("STAGGER_LOG_LEVEL");
  return env != nullptr && *env != '\0';
}

Level GetLevel() {
  int v = g_level.load(std::memory_order_relaxed);
  if (v == kUnset) {
    int want = static_cast<int>(FromEnvironment());
    // A concurrent SetLevel wins.
    g_level.compare_exchange_strong(v, want);
    v = g_level.load();
  }
  return static_cast<Level>(v);
}

bool Enabled(Level level) {
  return static_cast<int>(level) >= static_cast<int>(GetLevel());
}

std::string Format(Level level, std::string_view component,
                   std::string_view message) {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  ::gmtime_r(&ts.tv_sec, &tm);
  char when[96];
  std::snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  std::string line =
      absl::StrCat(when, " ", std::string(1, kLetters[static_cast<int>(level)]),
                   " ", AsAbsl(component), ": ");
  // One event, one line: newlines inside the message are escaped.
  for (char c : message) {
    if (c == '\n') {
      line += "\\n";
    } else {
      line += c;
    }
  }
  line += '\n';
  return line;
}

void Write(Level level, std::string_view component, std::string_view message) {
  if (!Enabled(level)) return;
  if (static_cast<int>(level) < g_floor.load(std::memory_order_relaxed)) {
    absl::MutexLock lock(&g_floor_mu);
    if (g_floor_component != nullptr && *g_floor_component == component) {
      return;
    }
  }
  const std::string line = Format(level, component, message);
  (void)!::write(2, line.data(), line.size());
}

}  // namespace stagger::log
