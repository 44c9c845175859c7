// Placement across failure domains: a rendezvous ranking of servers
// reordered so that the first servers of the ranking are in distinct
// domains (stagger-server --domain: a node, a rack). Copies go to the first
// R servers that are up, so with at least R domains no two copies of a
// chunk share one; a copy whose server is down goes to the next, which is
// in a domain not used yet while there is one.
//
//   ranked  a(x) b(x) c(y) d(z)   ->   a(x) c(y) d(z) b(x)
//
// A server without a domain is a domain of its own, so a set of servers
// none of which names one keeps its ranking (and so where every chunk
// already stored is). Before the spread, ServerSet::Rank moves the best-
// ranked server of the writer's node to the front (local first,
// client/README.md).
//
// Pure; thread-safe.
#ifndef STAGGER_CLIENT_PLACEMENT_H_
#define STAGGER_CLIENT_PLACEMENT_H_

#include <cstddef>
#include <string>
#include <vector>

namespace stagger::client {

// `domains[i]` is the domain of the i-th server of a ranking ("" : its
// own). Returns the positions of that ranking, reordered: the first server
// of each domain in ranking order, then the others in ranking order.
std::vector<size_t> SpreadOverDomains(const std::vector<std::string>& domains);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_PLACEMENT_H_
