#include "server/server.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "format/record.h"
#include "metrics/http_exporter.h"
#include "server/compactor.h"
#include "server/control_calls.h"
#include "server/control_service.h"
#include "server/data_service.h"
#include "server/memory_tier.h"
#include "server/meta_store.h"
#include "server/metrics_page.h"
#include "server/promoter.h"
#include "server/storage/segment_store.h"
#include "server/tier/cold_read.h"
#include "server/tier/drainer.h"
#include "transport/transport.h"
#include "transport/ucx_transport.h"
#include "util/executor.h"
#include "util/log.h"

namespace stagger::server {

// How long a shutdown waits for the memory tier to reach the disk.
constexpr absl::Duration kFinishWriteBehind = absl::Seconds(60);

class Server::Impl {
 public:
  std::unique_ptr<transport::Transport> owned_transport;
  std::unique_ptr<MetaStore> meta;
  std::unique_ptr<SegmentStore> segments;
  std::unique_ptr<Compactor> compactor;
  std::unique_ptr<Rebaser> rebaser;
  std::unique_ptr<tier::Drainer> drainer;
  std::unique_ptr<Executor> ingest;
  std::unique_ptr<Executor> readers;
  // Outlives every payload Buffer it charged: reset after the stores.
  std::unique_ptr<IngestAdmission> admission;
  std::unique_ptr<MemoryTier> memory;  // outlives the services using it
  std::unique_ptr<Authorizer> auth;    // read by the services below
  std::unique_ptr<ManifestLog> manifest_log;
  std::unique_ptr<DataService> data;
  std::unique_ptr<transport::Listener> listener;
  std::unique_ptr<ControlService> control;
  ControlCalls control_calls;  // counted by the gRPC server below
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<Promoter> promoter;  // calls control and the peers
  std::unique_ptr<metrics::HttpExporter> metrics;  // reads all of the above
  std::string grpc_address;
  bool stopped = false;
  // The data directory this start created (removed again when the start
  // fails: a mistyped flag leaves nothing behind), and the PID file it
  // wrote (removed at a clean stop).
  std::string created_data_dir;
  std::string pid_file;
  bool started = false;

  ~Impl() {
    Shutdown();
    if (!started && !created_data_dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(created_data_dir, ec);
    }
  }

  // The steps of Server::Start, in order; each fills members above.
  Status OpenStores(const ServerOptions& options);
  void StartServices(const ServerOptions& options,
                     std::unique_ptr<Authorizer> authorizer);
  Status StartDataPlane(const ServerOptions& options);
  Status StartControlPlane(const ServerOptions& options,
                           std::shared_ptr<grpc::ServerCredentials> creds,
                           const std::string& grpc_host);
  Status StartMetrics(const ServerOptions& options);
  Status StartPromoter(const ServerOptions& options);
  // Imports the steps only the cold store holds, before anything is
  // served. NOT_FOUND when the pool does not exist; a store that cannot be
  // reached is logged and the server starts anyway (saves go to the disk).
  Status ImportColdSteps(const ServerOptions& options);

  void Shutdown() {
    if (stopped) return;
    stopped = true;
    metrics.reset();
    // Before the control plane: it commits through it (a Flush in flight
    // is cancelled).
    if (control) control->SetPromoter(nullptr);
    promoter.reset();
    // The drain's writes in flight finish; the rest waits for the next
    // start (a step is marked drained only once all of it is stored).
    if (drainer) drainer->Stop();
    // Compaction first: a Gc waiting for its pass returns at once, so the
    // control plane's shutdown does not wait for a long pass.
    if (compactor) compactor->Stop();
    // Control plane: no new calls start; those in flight get 500 ms, then
    // are cancelled. Without a deadline gRPC's shutdown took about 5 s with
    // a client connected and idle (a SIGTERM'd server held its port that
    // long). A commit cancelled here is sent again by the client once the
    // server is back, and a repeated commit is idempotent.
    if (grpc_server) {
      grpc_server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(500));
    }
    // Data plane: refuse new requests, let accepted ones reply.
    if (data) {
      data->StopAccepting();
      data->WaitIdle();
      // What the memory tier holds goes to disk before the stores close.
      Status written = data->FinishWriteBehind(kFinishWriteBehind);
      if (!written.ok()) {
        log::Error("stagger-server",
                   absl::StrCat("shutting down with chunks in memory only "
                                "(their steps are dropped at the next start): ",
                                written.message()));
      }
    }
    listener.reset();
    readers.reset();
    ingest.reset();
    rebaser.reset();
    drainer.reset();
    compactor.reset();
    segments.reset();
    admission.reset();
    meta.reset();
    owned_transport.reset();
    if (!pid_file.empty()) {
      std::error_code ec;
      std::filesystem::remove(pid_file, ec);
    }
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Shutdown(); }
void Server::Shutdown() { impl_->Shutdown(); }
std::string Server::grpc_address() const { return impl_->grpc_address; }
std::string Server::metrics_address() const {
  return impl_->metrics ? impl_->metrics->address() : std::string();
}
std::string Server::data_address() const {
  return impl_->listener ? impl_->listener->address() : std::string();
}
RebaserStats Server::rebaser_stats() const {
  return impl_->rebaser ? impl_->rebaser->Stats() : RebaserStats();
}
void Server::WaitRebased() {
  if (impl_->rebaser) impl_->rebaser->WaitIdle();
}
tier::DrainerStats Server::drainer_stats() const {
  return impl_->drainer ? impl_->drainer->stats() : tier::DrainerStats();
}
bool Server::WaitDrained(int64_t timeout_ms) {
  return impl_->drainer &&
         impl_->drainer->WaitDrained(absl::Milliseconds(timeout_ms));
}
AdmissionStats Server::admission_stats() const {
  return impl_->admission ? impl_->admission->Stats() : AdmissionStats();
}

namespace {

Result<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  if (!f || s.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' cannot be read or is empty"));
  }
  return s.str();
}

// TLS when a certificate and key are given, plaintext otherwise.
Result<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerOptions& o) {
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both a certificate (--tls-cert) and its key (--tls-key)");
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  STAGGER_ASSIGN_OR_RETURN(pair.cert_chain,
                           ReadPem(o.tls_cert_file, "TLS certificate"));
  STAGGER_ASSIGN_OR_RETURN(pair.private_key,
                           ReadPem(o.tls_key_file, "TLS key"));
  ssl.pem_key_cert_pairs.push_back(pair);
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

// Who may call: a tokens file's grants, or nobody but this host. A server
// without tokens on a non-loopback address would let anyone who reaches it
// read, write and delete every job.
static Result<std::unique_ptr<Authorizer>> AccessFor(
    const ServerOptions& options, const std::string& grpc_host) {
  if (!options.auth_tokens_file.empty()) {
    return Authorizer::FromFile(options.auth_tokens_file);
  }
  if (!options.insecure && !IsLoopbackHost(grpc_host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listening on ", grpc_host,
        " without --auth-tokens would let anyone who reaches it read, "
        "write and delete every job; give --auth-tokens FILE, listen on "
        "127.0.0.1, or pass --insecure"));
  }
  return std::unique_ptr<Authorizer>();
}

Status Server::Impl::OpenStores(const ServerOptions& options) {
  std::error_code ec;
  if (!std::filesystem::exists(options.data_dir, ec) && !ec) {
    created_data_dir = options.data_dir;
  }
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create data directory ", options.data_dir, ": ", ec.message()));
  }
  const std::string pid_file = options.data_dir + "/stagger-server.pid";
  auto opened = MetaStore::Open(options.data_dir + "/meta", options.meta_env);
  if (!opened.ok() &&
      opened.status().message().find("lock") != std::string_view::npos) {
    // RocksDB's "While lock file: .../LOCK: Resource temporarily
    // unavailable": another process has the index open.
    std::ifstream f(pid_file);
    long pid = 0;
    const bool known = static_cast<bool>(f >> pid) && pid > 0;
    return absl::FailedPreconditionError(absl::StrCat(
        "data directory ", options.data_dir,
        " is in use by another "
        "stagger-server",
        known ? absl::StrCat(" (PID ", pid, ", from ", pid_file, ")") : "",
        ": one server per --data; stop it or choose another directory"));
  }
  STAGGER_ASSIGN_OR_RETURN(meta, std::move(opened));
  {
    // Who holds the directory, for the message above (best effort).
    std::ofstream f(pid_file, std::ios::trunc);
    f << ::getpid() << "\n";
    if (f) this->pid_file = pid_file;
  }
  // Shards committed at memory level and never made disk-level: their
  // chunks may have been in the RAM of a server that crashed (this one).
  // They are taken out of their steps (never listed complete with bytes
  // missing) until the servers confirm their chunks on disk (promoter.h).
  STAGGER_ASSIGN_OR_RETURN(auto set_aside, meta->SetAsideMemoryShards());
  for (const auto& [job, steps] : set_aside) {
    log::Warning(
        "stagger-server",
        absl::StrCat("job '", job, "': memory-level step(s) ",
                     absl::StrJoin(steps, ", "),
                     " set aside until their chunks are confirmed on the "
                     "servers' disks (they are not listed until then)"));
  }
  SegmentStoreOptions seg;
  seg.dir = options.data_dir + "/segments";
  seg.segment_bytes = options.segment_bytes;
  seg.short_lived_segment_bytes = options.short_segment_bytes;
  seg.fs = options.file_system;
  // A file system that refuses O_DIRECT is logged by the segment store
  // when it first refuses it (at the first segment opened).
  STAGGER_ASSIGN_OR_RETURN(segments, SegmentStore::Open(seg));
  if (options.compact_threshold > 0) {
    CompactorOptions co;
    co.threshold = options.compact_threshold;
    co.bytes_per_s = options.compact_bytes_per_s;
    co.max_space_amp = options.compact_space_amp;
    STAGGER_ASSIGN_OR_RETURN(compactor,
                             Compactor::Create(segments.get(), meta.get(), co));
  }
  return absl::OkStatus();
}

void Server::Impl::StartServices(const ServerOptions& options,
                                 std::unique_ptr<Authorizer> authorizer) {
  ingest = std::make_unique<Executor>(2);
  readers = std::make_unique<Executor>(options.read_threads);
  admission = std::make_unique<IngestAdmission>(options.ingest_budget_bytes);
  data = std::make_unique<DataService>(segments.get(), meta.get(), ingest.get(),
                                       readers.get(), admission.get());
  if (options.memory_bytes > 0) {
    memory = std::make_unique<MemoryTier>(
        options.memory_bytes,
        absl::Milliseconds(options.write_behind_delay_ms));
    IngestAdmission* adm = admission.get();
    data->SetMemoryTier(memory.get(), [adm] {
      const AdmissionStats a = adm->Stats();
      return a.in_flight_bytes > 0 || a.queue_depth > 0;
    });
  }
  if (options.rebase_deltas) {
    rebaser = std::make_unique<Rebaser>(segments.get(), meta.get());
    rebaser->SetCompactor(compactor.get());
    DataService* served = data.get();
    rebaser->SetClientTraffic([served] { return served->ClientTraffic(); });
    data->SetRebaser(rebaser.get());
  }
  if (options.cold_store != nullptr) {
    tier::DrainerOptions d;
    d.bytes_per_s = options.drain_bytes_per_s;
    d.keep = options.cold_keep;
    d.import_ms = options.cold_import_ms;
    d.grace_s = options.gc_grace_ms / 1000;
    IngestAdmission* adm = admission.get();
    DataService* served = data.get();
    d.busy = [adm, served] {
      const AdmissionStats a = adm->Stats();
      return a.in_flight_bytes > 0 || a.queue_depth > 0 ||
             served->ClientTraffic();
    };
    drainer = std::make_unique<tier::Drainer>(meta.get(), segments.get(),
                                              options.cold_store, d);
    data->SetColdStore(options.cold_store);
  }
  auth = std::move(authorizer);
  manifest_log = std::make_unique<ManifestLog>(options.data_dir + "/manifests",
                                               segments->file_system());
  data->SetAuthorizer(auth.get());
}

Status Server::Impl::StartDataPlane(const ServerOptions& options) {
  transport::Transport* transport = options.transport;
  if (transport == nullptr) {
    transport::UcxTransportOptions ucx;
    if (auth == nullptr && !options.insecure) {
      // Without tokens the data plane stays where the control plane is:
      // UCX's tcp transport listens on the loopback device alone.
      ucx.net_devices = "lo";
    }
    // The memory tier keeps received buffers: fault them in 2 MiB at a
    // time.
    ucx.huge_page_buffers = options.memory_bytes > 0;
    if (options.memory_bytes > 0 && options.memory_prefill_chunk_bytes > 0) {
      // Its RAM mapped and faulted at start (in the background), in blocks
      // for chunks of the default size: the first memory save into an
      // empty tier does not pay a page fault per 2 MiB as it arrives. The
      // tier's chunks come back to the cache as they are evicted.
      ucx.pull_buffer_cache_bytes =
          std::max<size_t>(ucx.pull_buffer_cache_bytes, options.memory_bytes);
      ucx.prefill_bytes = options.memory_bytes;
      ucx.prefill_payload_bytes = options.memory_prefill_chunk_bytes;
      ucx.prefill_headroom = format::kRecordHeaderSize;
    }
    ucx.cross_memory = options.cross_memory;
    STAGGER_ASSIGN_OR_RETURN(owned_transport, transport::NewUcxTransport(ucx));
    transport = owned_transport.get();
  }
  transport::ListenOptions listen_options;
  listen_options.admission = admission.get();
  // Room for the record header: the segment store writes a chunk straight
  // from the buffer it was received into.
  listen_options.payload_headroom = format::kRecordHeaderSize;
  // UCX listens at its worker's address, handed out by Hello alone.
  const std::string data_listen =
      options.data_listen.empty() ? "ucx:" : options.data_listen;
  STAGGER_ASSIGN_OR_RETURN(
      listener, transport->Listen(data_listen, data.get(), listen_options));
  return absl::OkStatus();
}

Status Server::Impl::StartControlPlane(
    const ServerOptions& options,
    std::shared_ptr<grpc::ServerCredentials> creds,
    const std::string& grpc_host) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::string identity = absl::StrCat(host, "/", listener->address());
  data->SetIdentity(identity, options.data_dir);
  control = std::make_unique<ControlService>(
      meta.get(), listener->address(), identity,
      RetentionPolicy{options.keep_last, options.gc_grace_ms}, compactor.get(),
      auth.get(), manifest_log.get(), segments.get());
  control->SetRebaser(rebaser.get());
  control->SetPartialWarning(absl::Milliseconds(options.partial_warn_ms));
  control->SetDomain(options.domain);
  control->SetNode(options.node.empty() ? host : options.node);
  control->SetDrainer(drainer.get());
  control->SetMemoryTier(memory.get());
  control->SetDataService(data.get());
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(options.listen, std::move(creds), &bound_port);
  builder.RegisterService(control.get());
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  grpc::ResourceQuota quota("stagger-control");
  quota.SetMaxThreads(std::max(options.control_threads, 4));
  builder.SetResourceQuota(quota);
  control_calls.Install(builder);
  grpc_server = builder.BuildAndStart();
  if (!grpc_server || bound_port == 0) {
    grpc_server.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", options.listen,
                     " (address in use or not local?)"));
  }
  grpc_address = absl::StrCat(grpc_host, ":", bound_port);
  return absl::OkStatus();
}

Status Server::Impl::StartPromoter(const ServerOptions& options) {
  PromoterOptions po;
  if (!options.peer_token_file.empty()) {
    STAGGER_ASSIGN_OR_RETURN(std::string text,
                             ReadPem(options.peer_token_file, "peer token"));
    po.token = text.substr(0, text.find('\n'));
    if (!po.token.empty() && po.token.back() == '\r') po.token.pop_back();
    if (po.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer token file '", options.peer_token_file,
                       "': its first line is empty"));
    }
  } else if (auth != nullptr) {
    log::Warning("stagger-server",
                 "--auth-tokens without --peer-token-file: this server cannot "
                 "ask the others whether memory-level saves are on their "
                 "disks; their clients make them disk-level, and those set "
                 "aside at a start wait for a client");
  }
  if (!options.tls_cert_file.empty()) {
    const std::string& roots = options.peer_tls_ca_file.empty()
                                   ? options.tls_cert_file
                                   : options.peer_tls_ca_file;
    grpc::SslCredentialsOptions ssl;
    STAGGER_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                             ReadPem(roots, "peer TLS roots"));
    po.credentials = grpc::SslCredentials(ssl);
  }
  ControlService* c = control.get();
  promoter = std::make_unique<Promoter>(
      meta.get(),
      [c](const pb::ShardManifest& m) {
        pb::CommitShardRequest req;
        *req.mutable_manifest() = m;
        req.set_chunks_elsewhere(true);
        return c->Commit(req);
      },
      std::move(po));
  control->SetPromoter(promoter.get());
  return absl::OkStatus();
}

Status Server::Impl::StartMetrics(const ServerOptions& options) {
  if (options.metrics_listen.empty()) return absl::OkStatus();
  MetricsSources sources;
  sources.data = data.get();
  sources.control = control.get();
  sources.control_calls = &control_calls;
  sources.segments = segments.get();
  sources.admission = admission.get();
  sources.rebaser = rebaser.get();
  sources.drainer = drainer.get();
  sources.memory = memory.get();
  sources.promoter = promoter.get();
  sources.data_dir = options.data_dir;
  STAGGER_ASSIGN_OR_RETURN(
      metrics, metrics::HttpExporter::Start(options.metrics_listen, [sources] {
        return RenderServerMetrics(sources);
      }));
  return absl::OkStatus();
}

Status Server::Impl::ImportColdSteps(const ServerOptions& options) {
  const std::string where = options.cold_store->Describe();
  Result<tier::ImportStats> imported = drainer->Import();
  if (absl::IsNotFound(imported.status())) return imported.status();
  if (!imported.ok()) {
    log::Warning("stagger-server",
                 absl::StrCat("cannot list the steps in ", where,
                              " (those this disk lacks are not served): ",
                              imported.status().message()));
  } else if (imported->steps > 0 || imported->refused > 0) {
    log::Info("stagger-server",
              absl::StrCat("imported ", imported->steps, " step(s) of ",
                           imported->jobs, " job(s) from ", where,
                           imported->refused > 0
                               ? absl::StrCat(", left out ", imported->refused)
                               : std::string()));
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("server needs a data directory");
  }
  if (options.ingest_budget_bytes == 0) {
    return absl::InvalidArgumentError("the ingest budget must be > 0 bytes");
  }
  // Before anything starts: a bad TLS setting or address stops the server
  // at once.
  STAGGER_ASSIGN_OR_RETURN(auto creds, ServerCredentials(options));
  STAGGER_ASSIGN_OR_RETURN(auto grpc_hp,
                           transport::SplitHostPort(options.listen));
  STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<Authorizer> auth,
                           AccessFor(options, grpc_hp.first));
  auto impl = std::make_unique<Impl>();
  STAGGER_RETURN_IF_ERROR(impl->OpenStores(options));
  impl->StartServices(options, std::move(auth));
  if (impl->drainer) STAGGER_RETURN_IF_ERROR(impl->ImportColdSteps(options));
  STAGGER_RETURN_IF_ERROR(impl->StartDataPlane(options));
  STAGGER_RETURN_IF_ERROR(
      impl->StartControlPlane(options, std::move(creds), grpc_hp.first));
  if (Status s = impl->StartPromoter(options); !s.ok()) {
    impl->Shutdown();
    return s;
  }
  if (Status s = impl->StartMetrics(options); !s.ok()) {
    impl->Shutdown();
    return s;
  }
  if (impl->drainer) {
    log::Info("stagger-server", absl::StrCat("draining complete steps to ",
                                             options.cold_store->Describe()));
    impl->drainer->Start();
  }
  impl->started = true;
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

}  // namespace stagger::server
