#include "util/time_text.h"

#include <ctime>

namespace stagger {

std::string UtcTimeText(int64_t unix_ms) {
  const time_t t = static_cast<time_t>(unix_ms / 1000);
  struct tm tm;
  if (gmtime_r(&t, &tm) == nullptr) return "?";
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace stagger
