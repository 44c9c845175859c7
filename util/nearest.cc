#include "util/nearest.h"

#include <algorithm>

namespace stagger::util {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string Nearest(const std::string& word,
                    const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = 3;  // at most two edits
  for (const std::string& n : names) {
    const size_t d = EditDistance(word, n);
    if (d < best_d) {
      best = n;
      best_d = d;
    }
  }
  return best;
}

std::string UnknownOption(int argc, char** argv,
                          const std::vector<std::string>& known) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") continue;
    const std::string name = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string near = Nearest(name, known);
    return "unknown option '" + name + "'" +
           (near.empty() ? "" : "; did you mean '" + near + "'?");
  }
  return "";
}

}  // namespace stagger::util
