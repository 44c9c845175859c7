// UtcTimeText: a Unix time in milliseconds as "2026-12-02T03:12:14Z" (UTC,
// ISO 8601, whole seconds), for the tools and messages that print times.
#ifndef STAGGER_UTIL_TIME_TEXT_H_
#define STAGGER_UTIL_TIME_TEXT_H_

#include <cstdint>
#include <string>

namespace stagger {

std::string UtcTimeText(int64_t unix_ms);

}  // namespace stagger

#endif  // STAGGER_UTIL_TIME_TEXT_H_
