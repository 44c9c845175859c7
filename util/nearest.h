// "Did you mean": the nearest of a set of names to a mistyped one, for the
// command lines' usage errors (stagger and stagger-server).
#ifndef STAGGER_UTIL_NEAREST_H_
#define STAGGER_UTIL_NEAREST_H_

#include <cstddef>
#include <string>
#include <vector>

namespace stagger::util {

// Levenshtein distance between `a` and `b`.
size_t EditDistance(const std::string& a, const std::string& b);

// The nearest of `names` to `word` when at most two edits away, else "".
std::string Nearest(const std::string& word,
                    const std::vector<std::string>& names);

// The first argument of argv[1..] that starts with "--" and is none of
// `known` (the part before any '='), with "; did you mean '--x'?" when one
// is near: "unknown option '--segmnet-mib'; did you mean '--segment-mib'?".
// "" when every option is known.
std::string UnknownOption(int argc, char** argv,
                          const std::vector<std::string>& known);

}  // namespace stagger::util

#endif  // STAGGER_UTIL_NEAREST_H_
