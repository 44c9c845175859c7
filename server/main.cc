// stagger-server: the storage daemon.
//
//   stagger-server --data DIR --listen HOST:PORT
//                  [--keep-last N] [--gc-grace-s S] [--segment-mib M]
//                  [--compact-threshold F] [--compact-space-amp F]
//                  [--compact-mib-per-s R]
//                  [--ingest-budget-mib B]
//                  [--memory-bytes N] [--domain NAME]
//
// Prints exactly one line to stdout once it accepts requests:
//   stagger-server ready grpc=HOST:PORT data=ucx:HEX
// (data: the UCX worker address that Hello hands to clients.) Nothing else
// reaches stdout: UCX's messages go to the log on stderr (transport/).
// SIGTERM or SIGINT: stop accepting, finish in-flight work, exit 0.
#include <grpc/support/log.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "format/names.h"
#include "server/rebuild.h"
#include "server/server.h"
#include "server/tier/rados_object_store.h"
#include "server/tier/s3_object_store.h"
#include "util/build_info.h"
#include "util/cli_checks.h"
#include "util/log.h"
#include "util/nearest.h"

int main(int argc, char** argv) {
  // Pulled payloads come from the transport's pool of recycled buffers;
  // records read for restores are fresh 4 KiB-aligned buffers of a few
  // MiB, freed once sent. Above glibc's mmap threshold each would be a new
  // mapping, zeroed page by page on first touch; keep them in the heap so
  // freed ones are reused (the ingest budget bounds how many are live).
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // Debian's Abseil is built without NDEBUG, so every absl::Mutex (ours and
  // gRPC's) would record lock orders in one process-wide graph under a
  // global lock: CPU and contention on every call. The tests keep the
  // check; the daemon does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // gRPC's own log lines (a raw error tree when a port is in use) go to
  // our log at debug level: the server says what failed in its own words.
  gpr_set_log_function([](gpr_log_func_args* args) {
    stagger::log::Debug("grpc", args->message);
  });
  CLI::App app{"stagger-server: stores stagger checkpoints"};
  app.set_version_flag("--version", stagger::BuildInfo("stagger-server"));
  stagger::server::ServerOptions options;
  app.add_option("--data", options.data_dir, "data directory")->required();
  app.add_option("--listen", options.listen,
                 "gRPC control-plane HOST:PORT (port 0 picks a free one)")
      ->capture_default_str();
  app.add_option("--domain", options.domain,
                 "this server's failure domain (its node or rack; letters, "
                 "digits, '.', '_', '-'): clients put a chunk's copies in "
                 "distinct domains")
      ->check([](const std::string& d) {
        stagger::Status s = stagger::format::ValidateName("domain", d);
        return s.ok() ? std::string() : std::string(s.message());
      });
  app.add_option("--node", options.node,
                 "the node (machine) this server runs on, told to clients: a "
                 "client puts the first copy of its chunks on a server of its "
                 "own node (CheckpointerOptions::node, $STAGGER_NODE, else "
                 "its host name) and reads from there first (default: this "
                 "host's name)")
      ->check([](const std::string& d) {
        stagger::Status s = stagger::format::ValidateName("node", d);
        return s.ok() ? std::string() : std::string(s.message());
      });
  app.add_option("--memory-bytes", options.memory_bytes,
                 "memory tier: hold up to this many bytes of chunks saved "
                 "with durability \"memory\" in RAM, serve them from there "
                 "and write them to disk behind (suffixes K, M, G, T: powers "
                 "of 1024; default 0: no memory tier)")
      ->transform(CLI::AsSizeValue(false))
      ->check([](const std::string& v) -> std::string {
        uint64_t n = 0;
        if (!CLI::detail::lexical_cast(v, n)) return "not a size: '" + v + "'";
        const uint64_t ram = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                             static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
        if (n > ram) {
          return "--memory-bytes " + v + " is more than this machine's " +
                 std::to_string(ram) + " bytes of RAM";
        }
        return "";
      });
  app.add_option("--memory-prefill-chunk", options.memory_prefill_chunk_bytes,
                 "memory tier: map and fault its RAM at start (in the "
                 "background) in buffers for chunks of this size, the "
                 "clients' chunk_size, so that the first memory save into "
                 "the empty tier takes no page faults (suffixes K, M, G; "
                 "0: no prefill)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--write-behind-delay-ms", options.write_behind_delay_ms,
                 "memory tier: write a held chunk to disk this long after it "
                 "came (fault drills; default 0: at once)")
      ->check(CLI::Range(int64_t{0}, int64_t{3600} * 1000))
      ->capture_default_str();
  app.add_option("--read-threads", options.read_threads,
                 "threads serving chunk reads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--control-threads", options.control_threads,
                 "threads running control-plane calls at once; more calls "
                 "are answered busy and repeated by the clients")
      ->check(CLI::Range(4, 1024))
      ->capture_default_str();
  app.add_option("--keep-last", options.keep_last,
                 "when a step completes, keep only this many newest complete "
                 "steps of its job (0: keep all)")
      ->capture_default_str();
  double gc_grace_s = 600;
  app.add_option("--gc-grace-s", gc_grace_s,
                 "retention spares chunks written this recently (saves in "
                 "flight)")
      ->check(stagger::NonNegative())
      ->capture_default_str();
  double partial_warn_s = 600;
  app.add_option("--partial-warn-s", partial_warn_s,
                 "log a step still partial this long after a rank first "
                 "committed it, naming the ranks missing (0: never)")
      ->check(stagger::NonNegative())
      ->capture_default_str();
  uint64_t segment_mib = options.segment_bytes >> 20;
  app.add_option("--segment-mib", segment_mib,
                 "roll to a new segment file past this many MiB")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  uint64_t short_segment_mib = options.short_segment_bytes >> 20;
  app.add_option("--short-segment-mib", short_segment_mib,
                 "segment files of short-lived records (what a save stores, "
                 "the newest versions rebases write whole) roll past this "
                 "many MiB, so they are removed whole once replaced (at "
                 "most --segment-mib)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--compact-threshold", options.compact_threshold,
                 "after a gc, rewrite sealed segments whose live bytes are "
                 "below this fraction of their size (0: never)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--compact-space-amp", options.compact_space_amp,
                 "while a job's segment files hold more than this many "
                 "times its live bytes, also rewrite the emptiest of the "
                 "others (0: no bound)")
      ->check([](const std::string& v) -> std::string {
        double d = 0;
        if (!CLI::detail::lexical_cast(v, d) || !(d == 0 || d >= 1)) {
          return "must be 0 (no bound) or at least 1, got '" + v + "'";
        }
        return "";
      })
      ->capture_default_str();
  double compact_mib_per_s = 64;
  app.add_option("--compact-mib-per-s", compact_mib_per_s,
                 "compaction copies at most this many MiB/s (0: unlimited)")
      ->check(stagger::NonNegative())
      ->capture_default_str();
  uint64_t ingest_budget_mib = options.ingest_budget_bytes >> 20;
  app.add_option("--ingest-budget-mib", ingest_budget_mib,
                 "admission: MiB of client data in flight inside the server "
                 "(pulled, not yet written; or being read for a restore)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--metrics-listen", options.metrics_listen,
                 "serve Prometheus metrics at http://HOST:PORT/metrics "
                 "(port 0 picks a free one; default: no metrics endpoint)");
  app.add_option("--tls-cert", options.tls_cert_file,
                 "PEM certificate chain: serve gRPC over TLS (with --tls-key)");
  app.add_option("--tls-key", options.tls_key_file,
                 "PEM private key of --tls-cert");
  app.add_option("--auth-tokens", options.auth_tokens_file,
                 "file of 'TOKEN JOB[,JOB...]' lines ('*': every job): every "
                 "call must carry a token allowed its job (default: no "
                 "tokens, and then only loopback addresses unless --insecure)");
  app.add_option("--peer-token-file", options.peer_token_file,
                 "file whose first line is a token the other servers accept "
                 "for every job: this server asks them whether the chunks of "
                 "memory-level saves are on their disks, to make those saves "
                 "disk-level itself (needed when they use --auth-tokens)");
  app.add_option("--peer-tls-ca", options.peer_tls_ca_file,
                 "PEM roots to trust the other servers' TLS certificates "
                 "(default: --tls-cert's chain)");
  bool no_rebase = false;
  app.add_flag("--no-rebase", no_rebase,
               "store deltas as clients send them instead of keeping the "
               "newest version of each chunk whole and the older ones as "
               "deltas of it (clients then cut their delta chains every "
               "delta_chain_max saves)");
  stagger::server::tier::RadosOptions rados;
  app.add_option("--rados-pool", rados.pool,
                 "drain every complete step to this Ceph RADOS pool in the "
                 "background (chunks by id, manifests last; default: no "
                 "durable tier)");
  app.add_option("--ceph-conf", rados.conf_file,
                 "Ceph configuration file for --rados-pool (default: "
                 "librados' own search, /etc/ceph/ceph.conf or $CEPH_CONF)");
  uint32_t rados_keep = 0;
  app.add_option("--rados-keep", rados_keep,
                 "keep the newest N steps of each job in the durable tier "
                 "(--rados-pool or --s3-bucket), and "
                 "the chunks they need (0: keep every step; --keep-last is "
                 "the disk's)")
      ->capture_default_str();
  stagger::server::tier::S3Options s3;
  app.add_option("--s3-bucket", s3.bucket,
                 "drain every complete step to this S3 bucket instead "
                 "(credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/"
                 "AWS_SESSION_TOKEN or ~/.aws/credentials, profile "
                 "$AWS_PROFILE; never on the command line)");
  app.add_option("--s3-endpoint", s3.endpoint,
                 "the S3 endpoint, http(s)://HOST[:PORT] (AWS: "
                 "https://s3.REGION.amazonaws.com)");
  app.add_option("--s3-prefix", s3.prefix,
                 "key prefix inside --s3-bucket (default: none)");
  app.add_option("--s3-region", s3.region, "region that signs requests")
      ->capture_default_str();
  app.add_option("--s3-ca-file", s3.ca_file,
                 "PEM roots to trust for an https endpoint (default: the "
                 "system's)");
  app.add_option("--s3-timeout-s", s3.timeout_s,
                 "a request to --s3-bucket, its retries included, gives up "
                 "after this long (the drain then tries again later)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  uint64_t s3_part_mib = 64;
  app.add_option("--s3-part-mib", s3_part_mib,
                 "objects above this many MiB go to --s3-bucket as multipart "
                 "uploads of parts this size (at least 5)")
      ->check(CLI::Range(uint64_t{5}, uint64_t{5120}))
      ->capture_default_str();
  std::string s3_addressing = "auto";
  app.add_option("--s3-addressing", s3_addressing,
                 "path (ENDPOINT/BUCKET/KEY: Ceph RGW, MinIO), virtual "
                 "(BUCKET.HOST/KEY) or auto (virtual for amazonaws.com)")
      ->check(CLI::IsMember({"auto", "path", "virtual"}))
      ->capture_default_str();
  double drain_mib_per_s = 0;
  app.add_option("--drain-mib-per-s", drain_mib_per_s,
                 "the drain to --rados-pool or --s3-bucket writes at most "
                 "this many MiB/s "
                 "(0: no cap; it always waits while clients save or restore)")
      ->check(stagger::NonNegative())
      ->capture_default_str();
  double cold_import_s = 30;
  app.add_option("--cold-import-s", cold_import_s,
                 "every this many seconds, list the durable tier for steps "
                 "other servers stored there and serve them (0: only at "
                 "start)")
      ->check(stagger::NonNegative())
      ->capture_default_str();
  bool rebuild = false;
  app.add_flag("--rebuild-index", rebuild,
               "rebuild the metadata (DIR/meta) from the segments and "
               "manifest logs, report, and exit (the old one is kept aside)");
  app.add_flag("--insecure", options.insecure,
               "without --auth-tokens, listen on addresses other machines "
               "can reach anyway: anyone who reaches them can read, write "
               "and delete every job");
  bool no_cross_memory = false;
  app.add_flag("--no-cross-memory", no_cross_memory,
               "never read or write the memory of clients on this host "
               "directly (UCX's cma: one copy, no socket); their payloads "
               "then go through UCX's other transports, or through cma "
               "driven by the clients themselves");
  std::string log_level = "info";
  app.add_option("--log-level", log_level,
                 "debug, info, warning or error: events below it are not "
                 "logged (stderr, one line each)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // A mistyped option: CLI11 says "The following arguments were not
    // expected" (or names a required one first); say which, and the near
    // one.
    std::vector<std::string> known = {"--help"};
    for (const CLI::Option* o : app.get_options()) {
      for (const std::string& n : o->get_lnames()) known.push_back("--" + n);
    }
    const std::string unknown = stagger::util::UnknownOption(argc, argv, known);
    fprintf(stderr, "stagger-server: %s\nRun 'stagger-server --help'.\n",
            unknown.empty() ? e.what() : unknown.c_str());
    return 2;
  }
  auto level = stagger::log::ParseLevel(log_level);
  if (!level.ok()) {
    fprintf(stderr, "stagger-server: --log-level: %s\n",
            std::string(level.status().message()).c_str());
    return 2;
  }
  stagger::log::SetLevel(*level);
  options.ingest_budget_bytes = ingest_budget_mib << 20;
  options.cross_memory = !no_cross_memory;
  options.gc_grace_ms = static_cast<int64_t>(gc_grace_s * 1000);
  options.partial_warn_ms = static_cast<int64_t>(partial_warn_s * 1000);
  options.segment_bytes = segment_mib << 20;
  options.short_segment_bytes = short_segment_mib << 20;
  options.rebase_deltas = !no_rebase;
  options.compact_bytes_per_s =
      static_cast<uint64_t>(compact_mib_per_s * (1 << 20));

  if (rebuild) {
    auto r = stagger::server::RebuildIndex(options.data_dir);
    if (!r.ok()) {
      fprintf(stderr, "stagger-server --rebuild-index: %s\n",
              r.status().ToString().c_str());
      return 1;
    }
    for (const std::string& p : r->problems) {
      fprintf(stderr, "stagger-server --rebuild-index: %s\n", p.c_str());
    }
    printf(
        "rebuilt %s: %llu jobs, %llu chunks from %llu records, %llu "
        "manifests (%llu refused), %llu complete steps, %llu chunks "
        "referenced but held elsewhere or lost, %llu torn segment tails%s%s\n",
        options.data_dir.c_str(), static_cast<unsigned long long>(r->jobs),
        static_cast<unsigned long long>(r->chunks),
        static_cast<unsigned long long>(r->segments_records),
        static_cast<unsigned long long>(r->manifests),
        static_cast<unsigned long long>(r->manifests_refused),
        static_cast<unsigned long long>(r->steps_complete),
        static_cast<unsigned long long>(r->chunks_elsewhere),
        static_cast<unsigned long long>(r->torn),
        r->old_meta.empty() ? "" : "; previous metadata kept in ",
        r->old_meta.c_str());
    return 0;
  }

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::unique_ptr<stagger::server::tier::ObjectStore> cold;
  const bool s3_flags =
      !s3.endpoint.empty() || !s3.prefix.empty() || !s3.ca_file.empty();
  if (!rados.conf_file.empty() && rados.pool.empty()) {
    fprintf(stderr, "stagger-server: --ceph-conf needs --rados-pool\n");
    return 2;
  }
  if (!rados.pool.empty() && !s3.bucket.empty()) {
    fprintf(stderr,
            "stagger-server: --rados-pool and --s3-bucket: one durable tier "
            "at a time\n");
    return 2;
  }
  if (s3_flags && s3.bucket.empty()) {
    fprintf(stderr,
            "stagger-server: --s3-endpoint, --s3-prefix and --s3-ca-file "
            "need --s3-bucket\n");
    return 2;
  }
  if (!s3.bucket.empty() && s3.endpoint.empty()) {
    fprintf(stderr, "stagger-server: --s3-bucket needs --s3-endpoint\n");
    return 2;
  }
  if (!rados.pool.empty() || !s3.bucket.empty()) {
    stagger::Result<std::unique_ptr<stagger::server::tier::ObjectStore>>
        opened = absl::UnknownError("no store");
    if (!rados.pool.empty()) {
      auto r = stagger::server::tier::RadosObjectStore::Open(rados);
      if (r.ok())
        opened = std::move(*r);
      else
        opened = r.status();
    } else {
      s3.addressing = s3_addressing == "path"
                          ? stagger::server::tier::S3Addressing::kPath
                      : s3_addressing == "virtual"
                          ? stagger::server::tier::S3Addressing::kVirtualHost
                          : stagger::server::tier::S3Addressing::kAuto;
      s3.part_bytes = s3_part_mib << 20;
      auto r = stagger::server::tier::S3ObjectStore::Open(s3);
      if (r.ok())
        opened = std::move(*r);
      else
        opened = r.status();
    }
    if (!opened.ok()) {
      fprintf(stderr, "stagger-server: %s\n",
              std::string(opened.status().ToString()).c_str());
      return 2;
    }
    cold = std::move(*opened);
    options.cold_store = cold.get();
    options.drain_bytes_per_s =
        static_cast<uint64_t>(drain_mib_per_s * (1 << 20));
    options.cold_keep = rados_keep;
    options.cold_import_ms = static_cast<int64_t>(cold_import_s * 1000);
  } else if (!rados.conf_file.empty() || drain_mib_per_s != 0 ||
             rados_keep != 0 || app.count("--cold-import-s") > 0) {
    fprintf(stderr,
            "stagger-server: --ceph-conf needs --rados-pool; --rados-keep, "
            "--drain-mib-per-s and --cold-import-s need --rados-pool or "
            "--s3-bucket\n");
    return 2;
  }
  auto server = stagger::server::Server::Start(options);
  if (!server.ok()) {
    fprintf(stderr, "stagger-server: %s\n",
            std::string(server.status().ToString()).c_str());
    return 1;
  }
  const std::string metrics = (*server)->metrics_address();
  printf("stagger-server ready grpc=%s data=%s%s%s\n",
         (*server)->grpc_address().c_str(), (*server)->data_address().c_str(),
         metrics.empty() ? "" : " metrics=", metrics.c_str());
  fflush(stdout);
  stagger::log::Info(
      "stagger-server",
      absl::StrCat(
          "serving ", options.data_dir, ": grpc ", (*server)->grpc_address(),
          ", data ", (*server)->data_address(), ", metrics ",
          metrics.empty() ? std::string("off") : metrics, ", ingest budget ",
          options.ingest_budget_bytes >> 20, " MiB"));

  int sig = 0;
  sigwait(&stop, &sig);
  stagger::log::Info("stagger-server",
                     absl::StrCat("signal ", sig, ", shutting down"));
  (*server)->Shutdown();
  stagger::log::Info("stagger-server", "stopped");
  return 0;
}
