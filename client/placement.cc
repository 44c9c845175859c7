#include "client/placement.h"

#include <set>

namespace stagger::client {

std::vector<size_t> SpreadOverDomains(const std::vector<std::string>& domains) {
  std::vector<size_t> first, rest;
  std::set<std::string> seen;
  for (size_t i = 0; i < domains.size(); ++i) {
    if (domains[i].empty() || seen.insert(domains[i]).second) {
      first.push_back(i);
    } else {
      rest.push_back(i);
    }
  }
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

}  // namespace stagger::client
