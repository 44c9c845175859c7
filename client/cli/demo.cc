// `stagger demo`: the main job end to end. Simulated ranks save realistic
// training state for a few steps, then the newest step is loaded back and
// compared bit for bit, restored to safetensors files, and verified.
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/session.h"
#include "client/cli/synthetic_state.h"
#include "client/embedded/embedded.h"
#include "stagger/checkpointer.h"

namespace stagger::client {
namespace {

struct RankResult {
  Status status;
  std::unique_ptr<Checkpointer> ck;
  std::unique_ptr<SyntheticState> state;
  std::vector<SaveStats> saves;  // one per step
  bool load_matches = false;
};

void SaveRank(const DemoArgs& a, const std::string& servers,
              const std::string& job, uint32_t rank, RankResult* out) {
  CheckpointerOptions o;
  o.servers = servers;
  o.tls_ca_file = TlsCaFile();
  o.token = Token();
  o.job = job;
  o.rank = rank;
  o.world_size = a.ranks;
  auto ck = Checkpointer::Open(o);
  if (!ck.ok()) {
    out->status = ck.status();
    return;
  }
  out->ck = std::move(*ck);
  out->state =
      std::make_unique<SyntheticState>(a.mib_per_rank << 20, 1000 + rank);
  for (SyntheticTensor& t : out->state->tensors()) {
    out->status = out->ck->Register({t.name, t.dtype, t.shape, t.bytes.data()});
    if (!out->status.ok()) return;
  }
  for (int step = 1; step <= a.steps; ++step) {
    out->state->Step();
    auto h = out->ck->Save(step);
    if (h.ok()) out->status = h->Wait();
    if (!h.ok() || !out->status.ok()) {
      if (!h.ok()) out->status = h.status();
      return;
    }
    out->saves.push_back(h->stats());
  }
}

// Loads the newest step into fresh memory and compares it bit for bit. Runs
// after every rank saved: "latest" is the newest step all ranks committed.
void LoadRank(const DemoArgs& a, RankResult* out) {
  Checkpointer* ck = out->ck.get();
  SyntheticState& state = *out->state;
  ck->ClearRegistrations();
  std::vector<std::vector<char>> fresh;
  for (SyntheticTensor& t : state.tensors()) {
    fresh.emplace_back(t.bytes.size(), '\0');
    out->status = ck->Register({t.name, t.dtype, t.shape, fresh.back().data()});
    if (!out->status.ok()) return;
  }
  auto loaded = ck->Load(kLatestStep);
  if (!loaded.ok()) {
    out->status = loaded.status();
    return;
  }
  out->load_matches = *loaded == a.steps;
  for (size_t i = 0; i < fresh.size(); ++i) {
    out->load_matches &= fresh[i] == state.tensors()[i].bytes;
  }
}

// Runs every rank's saves, then (if all saved) every rank's load, each rank
// on a thread of its own.
std::vector<RankResult> SaveAndLoad(const DemoArgs& a,
                                    const std::string& servers,
                                    const std::string& job) {
  std::vector<RankResult> results(a.ranks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < a.ranks; ++r) {
    threads.emplace_back(SaveRank, std::cref(a), std::cref(servers),
                         std::cref(job), r, &results[r]);
  }
  for (auto& t : threads) t.join();
  threads.clear();
  bool saved = true;
  for (const RankResult& r : results) saved &= r.status.ok();
  for (uint32_t r = 0; r < a.ranks && saved; ++r) {
    threads.emplace_back(LoadRank, std::cref(a), &results[r]);
  }
  for (auto& t : threads) t.join();
  return results;
}

// Prints each step's bytes and durable time over all ranks, and whether
// every rank loaded its bytes back; returns whether they all did.
bool PrintSteps(const DemoArgs& a, const std::vector<RankResult>& results,
                double total_s) {
  printf("\n%-6s %12s %14s %8s %12s\n", "STEP", "RAW_MiB", "SHIPPED_MiB",
         "RATIO", "DURABLE_S");
  for (int s = 0; s < a.steps; ++s) {
    uint64_t raw = 0, shipped = 0;
    double durable = 0;
    for (const RankResult& r : results) {
      raw += r.saves[s].bytes_raw;
      shipped += r.saves[s].bytes_shipped;
      durable = std::max(durable, r.saves[s].durable_s);
    }
    printf("%-6d %12.1f %14.1f %8.2f %12.3f\n", s + 1, raw / 1048576.0,
           shipped / 1048576.0, shipped ? double(raw) / shipped : 0.0, durable);
  }
  bool all_match = true;
  for (const RankResult& r : results) all_match &= r.load_matches;
  printf("\nload of step %d on %u %s: %s\n", a.steps, a.ranks,
         a.ranks == 1 ? "rank" : "ranks", all_match ? "bit-exact" : "MISMATCH");
  printf("save+load wall time: %.2f s\n\n", total_s);
  return all_match;
}

// Restores the latest step into a temporary directory, verifies it on the
// servers, and removes the directory; returns the exit code.
int RestoreAndVerify(const std::string& grpc, const std::string& job) {
  const std::string first = grpc.substr(0, grpc.find(','));
  char out_tmpl[] = "/tmp/stagger-demo-restore-XXXXXX";
  if (mkdtemp(out_tmpl) == nullptr) {
    return Fail("demo",
                absl::UnavailableError(absl::StrCat(
                    "cannot create a temporary directory: ", strerror(errno))));
  }
  const std::string out_dir = out_tmpl;
  int rc = 0;
  RestoreArgs ra{first, job, "latest", out_dir};
  if (RunRestore(ra) != 0) rc = 1;
  VerifyArgs va{first, job, "latest"};
  if (RunVerify(va) != 0) rc = 1;
  std::filesystem::remove_all(out_dir);
  return rc;
}

// Saves, loads, restores and verifies against `servers`; returns the exit
// code. Everything it creates is gone when it returns.
int DemoAgainst(const DemoArgs& a, const std::string& servers,
                const std::string& dir, const std::string& job) {
  auto resolved = ResolveServers(servers);
  if (!resolved.ok()) return Fail("demo", resolved.status());
  printf("stagger demo: job %s, %u ranks x %llu MiB, %d steps, servers %s\n",
         job.c_str(), a.ranks, static_cast<unsigned long long>(a.mib_per_rank),
         a.steps,
         dir.empty() ? servers.c_str() : ("embedded (" + dir + ")").c_str());
  auto start = std::chrono::steady_clock::now();
  std::vector<RankResult> results = SaveAndLoad(a, servers, job);
  double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (uint32_t r = 0; r < a.ranks; ++r) {
    if (!results[r].status.ok()) {
      return Fail("demo",
                  WithContext(results[r].status, absl::StrCat("rank ", r)));
    }
  }
  const int rc = PrintSteps(a, results, total_s) ? 0 : 1;
  return RestoreAndVerify(resolved->addresses, job) != 0 ? 1 : rc;
}

}  // namespace

int RunDemo(const DemoArgs& a) {
  std::string dir;
  std::string servers = a.servers;
  if (servers.empty()) {
    char tmpl[] = "/tmp/stagger-demo-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      return Fail("demo", absl::UnavailableError(absl::StrCat(
                              "cannot create a temporary directory: ",
                              strerror(errno))));
    }
    dir = tmpl;
    servers = "embedded:" + dir + "/data";
  }
  // A job named on the command line is used as it is (a step it already
  // has is refused at the save, saying so); the default is a new job each
  // run, so that running the demo twice against the same servers works.
  std::string job = a.job;
  if (job.empty()) {
    job = absl::StrCat("demo-",
                       std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count());
  }
  int rc = DemoAgainst(a, servers, dir, job);
  if (!dir.empty()) std::filesystem::remove_all(dir);
  printf("stagger demo: %s\n", rc == 0 ? "OK" : "FAILED");
  return rc;
}

}  // namespace stagger::client
