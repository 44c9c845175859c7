// Helpers shared by the durable-tier tests (rados_test, s3_test): a
// server's drain progress from its metrics, and the round trip every tier
// must pass (steps drained, the server and its disk gone, a new server on
// an empty --data serving them bit-exact).
#ifndef STAGGER_TESTS_COLD_TIER_UTIL_H_
#define STAGGER_TESTS_COLD_TIER_UTIL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stagger/checkpointer.h"
#include "testutil/process.h"

namespace stagger::testutil {

// The value of an unlabelled sample on a metrics page; -1 when absent.
double Sample(const std::string& page, const std::string& name);

// Polls `server`'s metrics until `steps` steps were drained by it and none
// is behind (a test failure after `timeout_s`); the last page.
std::string WaitDrained(ServerProcess& server, double steps,
                        double timeout_s = 120);

// A Checkpointer of `job` on `servers`, chunks of 1 MiB, `codec` (nullptr,
// with a test failure, when it cannot open).
std::unique_ptr<Checkpointer> OpenJob(const std::string& servers,
                                      const std::string& job,
                                      CodecChoice codec = CodecChoice::kAuto);

// Step `step` of `job` (one U8 tensor "w") loads through `server` with
// the bytes `want`.
void ExpectLoads(ServerProcess& server, const std::string& job, int64_t step,
                 const std::vector<char>& want);

// A load of step 1 of `job` (one U8 tensor "w" of `bytes`) through
// `server` fails with DATA_LOSS naming `object`.
void ExpectDataLossNaming(ServerProcess& server, const std::string& job,
                          size_t bytes, const std::string& object);

// Makes a server with the tier under test on data directory `data`.
using StartTierServer =
    std::function<std::unique_ptr<ServerProcess>(const std::string& data)>;

// Two steps of `job` (the second mostly unchanged, so stored as deltas)
// saved on a server `start` makes in `dir`/a and drained; `stagger ls`
// shows them on the disk and cold; that server and its disk gone, a new
// one on an empty `dir`/fresh lists both as cold only and loads each
// bit-exact.
void RoundTripThroughTheTier(const StartTierServer& start,
                             const std::string& dir, const std::string& job);

}  // namespace stagger::testutil

#endif  // STAGGER_TESTS_COLD_TIER_UTIL_H_
