// Child processes of a benchmark driver: the driver runs itself again
// (/proc/self/exe) with other arguments, talks to each child through its
// stdin (a byte to go) and stdout (words it prints), and reads processes'
// resident memory.
//
// Thread-safety: plain functions; a Child has one owner.
#ifndef STAGGER_BENCH_CHILDREN_H_
#define STAGGER_BENCH_CHILDREN_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "stagger/status.h"

namespace stagger::bench {

struct Child {
  pid_t pid = -1;
  int to = -1;    // its stdin
  int from = -1;  // its stdout
  std::string out;
};

// Runs this executable with `args` (args[0] is its argv[0]).
Result<Child> SpawnChild(const std::vector<std::string>& args);

// Reads what the children printed until each one's output contains `word`
// (or it exited). Returns an error naming the first child that failed (it
// printed "error", or exited before `word`); DEADLINE_EXCEEDED after
// `timeout_s`. `tick` (optional) runs about every 100 ms meanwhile.
Status WaitFor(std::vector<Child>& kids, const std::string& word,
               double timeout_s, const std::function<void()>& tick = nullptr);

// VmRSS of process `pid` in bytes (0 when it cannot be read).
uint64_t RssBytes(pid_t pid);

}  // namespace stagger::bench

#endif  // STAGGER_BENCH_CHILDREN_H_
