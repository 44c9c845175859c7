// JsonQuote: a string as a JSON string literal (quotes, backslashes and
// control characters escaped), for the tools that print JSON by hand.
#ifndef STAGGER_UTIL_JSON_H_
#define STAGGER_UTIL_JSON_H_

#include <string>
#include <string_view>

namespace stagger {

std::string JsonQuote(std::string_view s);

}  // namespace stagger

#endif  // STAGGER_UTIL_JSON_H_
