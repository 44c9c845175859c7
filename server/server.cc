#include "server/server.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "format/record.h"
#include "metrics/http_exporter.h"
#include "qos/executor.h"
#include "server/compactor.h"
#include "server/control_service.h"
#include "server/data_service.h"
#include "server/meta_store.h"
#include "server/metrics_page.h"
#include "server/storage/segment_store.h"
#include "transport/transport.h"
#include "transport/ucx_transport.h"
#include "util/log.h"

namespace stagger::server {

class Server::Impl {
 public:
  std::unique_ptr<transport::Transport> owned_transport;
  std::unique_ptr<MetaStore> meta;
  std::unique_ptr<SegmentStore> segments;
  std::unique_ptr<Compactor> compactor;
  std::unique_ptr<Rebaser> rebaser;
  std::unique_ptr<qos::Executor> ingest;
  std::unique_ptr<qos::Executor> readers;
  // Outlives every payload Buffer it charged: reset after the stores.
  std::unique_ptr<IngestAdmission> admission;
  std::unique_ptr<Authorizer> auth;  // read by the services below
  std::unique_ptr<ManifestLog> manifest_log;
  std::unique_ptr<DataService> data;
  std::unique_ptr<transport::Listener> listener;
  std::unique_ptr<ControlService> control;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<metrics::HttpExporter> metrics;  // reads all of the above
  std::string grpc_address;
  bool stopped = false;

  void Shutdown() {
    if (stopped) return;
    stopped = true;
    metrics.reset();
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
    }
    listener.reset();
    readers.reset();
    ingest.reset();
    rebaser.reset();
    compactor.reset();
    segments.reset();
    admission.reset();
    meta.reset();
    owned_transport.reset();
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

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("server needs a data directory");
  }
  if (options.ingest_budget_bytes == 0) {
    return absl::InvalidArgumentError("the ingest budget must be > 0 bytes");
  }
  // Before anything starts: a bad TLS setting stops the server at once.
  STAGGER_ASSIGN_OR_RETURN(auto creds, ServerCredentials(options));
  STAGGER_ASSIGN_OR_RETURN(auto grpc_hp,
                           transport::SplitHostPort(options.listen));
  // UCX listens at its worker's address, handed out by Hello alone.
  std::string data_listen =
      options.data_listen.empty() ? "ucx:" : options.data_listen;
  std::unique_ptr<Authorizer> auth;
  if (!options.auth_tokens_file.empty()) {
    STAGGER_ASSIGN_OR_RETURN(auth,
                             Authorizer::FromFile(options.auth_tokens_file));
  } else if (!options.insecure) {
    if (const std::string& host = grpc_hp.first; !IsLoopbackHost(host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "listening on ", host,
          " without --auth-tokens would let anyone who reaches it read, "
          "write and delete every job; give --auth-tokens FILE, listen on "
          "127.0.0.1, or pass --insecure"));
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create data directory ", options.data_dir, ": ", ec.message()));
  }

  auto impl = std::make_unique<Impl>();
  const std::string pid_file = options.data_dir + "/stagger-server.pid";
  auto meta = MetaStore::Open(options.data_dir + "/meta");
  if (!meta.ok() &&
      meta.status().message().find("lock") != std::string_view::npos) {
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
  STAGGER_ASSIGN_OR_RETURN(impl->meta, std::move(meta));
  {
    // Who holds the directory, for the message above (best effort).
    std::ofstream f(pid_file, std::ios::trunc);
    f << ::getpid() << "\n";
  }
  SegmentStoreOptions seg;
  seg.dir = options.data_dir + "/segments";
  seg.segment_bytes = options.segment_bytes;
  seg.fs = options.file_system;
  STAGGER_ASSIGN_OR_RETURN(impl->segments, SegmentStore::Open(seg));
  if (!impl->segments->direct_io()) {
    log::Warning("stagger-server",
                 absl::StrCat("O_DIRECT not supported under ", seg.dir,
                              "; writing segments through the page cache"));
  }
  if (options.compact_threshold > 0) {
    CompactorOptions co;
    co.threshold = options.compact_threshold;
    co.bytes_per_s = options.compact_bytes_per_s;
    co.max_space_amp = options.compact_space_amp;
    STAGGER_ASSIGN_OR_RETURN(
        impl->compactor,
        Compactor::Create(impl->segments.get(), impl->meta.get(), co));
  }
  impl->ingest = std::make_unique<qos::Executor>(2);
  impl->readers = std::make_unique<qos::Executor>(options.read_threads);
  impl->admission =
      std::make_unique<IngestAdmission>(options.ingest_budget_bytes);
  impl->data = std::make_unique<DataService>(
      impl->segments.get(), impl->meta.get(), impl->ingest.get(),
      impl->readers.get(), impl->admission.get());
  if (options.rebase_deltas) {
    impl->rebaser =
        std::make_unique<Rebaser>(impl->segments.get(), impl->meta.get());
    impl->rebaser->SetCompactor(impl->compactor.get());
    impl->data->SetRebaser(impl->rebaser.get());
  }
  impl->auth = std::move(auth);
  impl->manifest_log =
      std::make_unique<ManifestLog>(options.data_dir + "/manifests");
  impl->data->SetAuthorizer(impl->auth.get());

  transport::Transport* transport = options.transport;
  if (transport == nullptr) {
    transport::UcxTransportOptions ucx;
    if (impl->auth == nullptr && !options.insecure) {
      // Without tokens the data plane stays where the control plane is:
      // UCX's tcp transport listens on the loopback device alone.
      ucx.net_devices = "lo";
    }
    STAGGER_ASSIGN_OR_RETURN(impl->owned_transport,
                             transport::NewUcxTransport(ucx));
    transport = impl->owned_transport.get();
  }
  transport::ListenOptions listen_options;
  listen_options.admission = impl->admission.get();
  // Room for the record header: the segment store writes a chunk straight
  // from the buffer it was received into.
  listen_options.payload_headroom = format::kRecordHeaderSize;
  STAGGER_ASSIGN_OR_RETURN(
      impl->listener,
      transport->Listen(data_listen, impl->data.get(), listen_options));

  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  impl->data->SetIdentity(absl::StrCat(host, "/", impl->listener->address()),
                          options.data_dir);
  impl->control = std::make_unique<ControlService>(
      impl->meta.get(), impl->listener->address(),
      absl::StrCat(host, "/", impl->listener->address()),
      RetentionPolicy{options.keep_last, options.gc_grace_ms},
      impl->compactor.get(), impl->auth.get(), impl->manifest_log.get(),
      impl->segments.get());
  impl->control->SetRebaser(impl->rebaser.get());
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(options.listen, creds, &bound_port);
  builder.RegisterService(impl->control.get());
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  impl->grpc_server = builder.BuildAndStart();
  if (!impl->grpc_server || bound_port == 0) {
    impl->grpc_server.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", options.listen,
                     " (address in use or not local?)"));
  }
  impl->grpc_address = absl::StrCat(grpc_hp.first, ":", bound_port);
  if (!options.metrics_listen.empty()) {
    MetricsSources sources;
    sources.data = impl->data.get();
    sources.control = impl->control.get();
    sources.segments = impl->segments.get();
    sources.admission = impl->admission.get();
    sources.rebaser = impl->rebaser.get();
    sources.data_dir = options.data_dir;
    auto exporter = metrics::HttpExporter::Start(
        options.metrics_listen,
        [sources] { return RenderServerMetrics(sources); });
    if (!exporter.ok()) {
      impl->Shutdown();
      return exporter.status();
    }
    impl->metrics = std::move(*exporter);
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

}  // namespace stagger::server
