// CLI11 checks whose refusals say what was wrong in a line a person reads
// (CLI11's own NonNegativeNumber prints its range up to DBL_MAX, 300
// digits). Header only: for the programs that link CLI11.
#ifndef STAGGER_UTIL_CLI_CHECKS_H_
#define STAGGER_UTIL_CLI_CHECKS_H_

#include <cstdlib>
#include <string>

#include "CLI/CLI.hpp"

namespace stagger {

// A number >= 0 (seconds, steps, ...); "-1" is refused as "-1 is negative:
// give a number >= 0".
inline CLI::Validator NonNegative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') {
          return text + " is not a number";
        }
        if (v < 0) return text + " is negative: give a number >= 0";
        return "";
      },
      "NUMBER >= 0");
}

}  // namespace stagger

#endif  // STAGGER_UTIL_CLI_CHECKS_H_
