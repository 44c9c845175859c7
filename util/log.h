// Logging: one line per event on stderr,
//   2026-11-30T05:56:23.123Z W stagger-server: message
// (UTC time with milliseconds, level letter D/I/W/E, component, message),
// written with a single write(2) so that lines from concurrent threads do
// not interleave. Events below the process's level are dropped.
//
// The level comes from SetLevel (stagger-server and stagger --log-level)
// or, until SetLevel is called, from $STAGGER_LOG_LEVEL (the library in a
// training process); default info. Messages are logged as given: callers
// must not pass secrets (tokens, keys) in them.
//
// Thread-safety: thread-safe.
#ifndef STAGGER_UTIL_LOG_H_
#define STAGGER_UTIL_LOG_H_

#include <string>
#include <string_view>

#include "stagger/status.h"

namespace stagger::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "debug", "info", "warning" (or "warn"), "error"; INVALID_ARGUMENT naming
// the accepted values otherwise.
Result<Level> ParseLevel(std::string_view text);
void SetLevel(Level level);
Level GetLevel();
bool Enabled(Level level);
// Events of `component` below `floor` are dropped too (the process's level
// still applies). An embedded server sets "stagger-server" to warning, so
// that a training script's stderr does not get a line per step.
void SetComponentFloor(std::string_view component, Level floor);
// Whether the level was given by $STAGGER_LOG_LEVEL.
bool LevelFromEnvironment();

// The line Write emits, without writing it (for tests).
std::string Format(Level level, std::string_view component,
                   std::string_view message);
void Write(Level level, std::string_view component, std::string_view message);

inline void Debug(std::string_view c, std::string_view m) {
  Write(Level::kDebug, c, m);
}
inline void Info(std::string_view c, std::string_view m) {
  Write(Level::kInfo, c, m);
}
inline void Warning(std::string_view c, std::string_view m) {
  Write(Level::kWarning, c, m);
}
inline void Error(std::string_view c, std::string_view m) {
  Write(Level::kError, c, m);
}

}  // namespace stagger::log

#endif  // STAGGER_UTIL_LOG_H_
