// stagger_test_rank: one simulated training rank as its own process, for the
// multi-process tests. Saves deterministic state for (rank, step), or loads
// a step and checks every byte against what that step's save wrote.
//
//   stagger_test_rank --servers S --job J --rank R --world W --mode save --step
//   N stagger_test_rank ... --mode load [--step N|latest] stagger_test_rank ...
//   --mode save-and-die --step N   (SIGKILLs itself
//                                   right after Save() returns)
// Prints "ok step=N" and exits 0; "error CODE: message" and exits 1; or
// "mismatch tensor=NAME" and exits 3.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "stagger/checkpointer.h"
#include "tests/testutil/pattern.h"

using stagger::testutil::BiasSeed;
using stagger::testutil::FillPattern;
using stagger::testutil::WeightSeed;

namespace {

int Error(const stagger::Status& s) {
  printf("error %s: %s\n", absl::StatusCodeToString(s.code()).c_str(),
         std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stagger test rank"};
  stagger::CheckpointerOptions o;
  std::string mode, step_text = "latest";
  uint64_t kib = 3000;
  app.add_option("--servers", o.servers)->required();
  app.add_option("--job", o.job)->required();
  app.add_option("--rank", o.rank)->required();
  app.add_option("--world", o.world_size)->required();
  app.add_option("--mode", mode)->required();
  app.add_option("--step", step_text);
  app.add_option("--kib", kib, "KiB of state per rank");
  app.add_option("--chunk-size", o.chunk_size);
  CLI11_PARSE(app, argc, argv);

  auto ck = stagger::Checkpointer::Open(o);
  if (!ck.ok()) return Error(ck.status());
  std::vector<char> a(kib * 1024 * 3 / 4), b(kib * 1024 / 4);
  auto reg = [&] {
    stagger::Status s = (*ck)->Register({"layer.weight",
                                         "F32",
                                         {static_cast<int64_t>(a.size() / 4)},
                                         a.data()});
    if (s.ok()) {
      s = (*ck)->Register(
          {"layer.bias", "U8", {static_cast<int64_t>(b.size())}, b.data()});
    }
    return s;
  };
  if (auto s = reg(); !s.ok()) return Error(s);

  if (mode == "save" || mode == "save-and-die") {
    int64_t step = std::stoll(step_text);
    FillPattern(a, WeightSeed(o.rank, step));
    FillPattern(b, BiasSeed(o.rank, step));
    auto h = (*ck)->Save(step);
    if (!h.ok()) return Error(h.status());
    if (mode == "save-and-die") {
      // The training process dies while the save drains in the background.
      printf("snapshot taken, dying\n");
      fflush(stdout);
      kill(getpid(), SIGKILL);
    }
    if (auto s = h->Wait(); !s.ok()) return Error(s);
    printf("ok step=%lld\n", static_cast<long long>(step));
    return 0;
  }
  if (mode == "load") {
    int64_t step =
        step_text == "latest" ? stagger::kLatestStep : std::stoll(step_text);
    auto loaded = (*ck)->Load(step);
    if (!loaded.ok()) return Error(loaded.status());
    std::vector<char> ea(a.size()), eb(b.size());
    FillPattern(ea, WeightSeed(o.rank, *loaded));
    FillPattern(eb, BiasSeed(o.rank, *loaded));
    if (ea != a) return printf("mismatch tensor=layer.weight\n"), 3;
    if (eb != b) return printf("mismatch tensor=layer.bias\n"), 3;
    printf("ok step=%lld\n", static_cast<long long>(*loaded));
    return 0;
  }
  printf("error INVALID_ARGUMENT: unknown mode '%s'\n", mode.c_str());
  return 1;
}
