// Server: one stagger-server, as the daemon and the embedded mode run it.
// Owns the metadata store, the segment store, the gRPC control plane and
// the data-plane listener.
//
//   Server ─┬─ MetaStore (RocksDB at <data>/meta)
//           ├─ SegmentStore (<data>/segments) ── writer thread (io_uring)
//           ├─ Compactor ── one thread, rewrites mostly dead segments
//           ├─ Rebaser ── one thread, keeps the newest chunk versions whole
//           ├─ tier::Drainer ── one thread (and its writers), copies
//           │    complete steps to the cold store (with --rados-pool)
//           ├─ Executor (reads)
//           ├─ IngestAdmission ── credit for pulls and reads (one budget)
//           ├─ DataService ── transport Listener (UCX or in-process)
//           └─ grpc::Server ── ControlService
//
// Thread-safety: Start and Shutdown from one thread; accessors anywhere.
#ifndef STAGGER_SERVER_SERVER_H_
#define STAGGER_SERVER_SERVER_H_

#include <memory>
#include <string>

#include "server/ingest_admission.h"
#include "server/rebaser.h"
#include "stagger/status.h"

namespace rocksdb {
class Env;
}

namespace stagger::transport {
class Transport;
}

namespace stagger::server {

class FileSystem;
namespace tier {
class ObjectStore;
struct DrainerStats;
}  // namespace tier

struct ServerOptions {
  std::string data_dir;                   // created if missing
  std::string listen = "127.0.0.1:7700";  // gRPC host:port; port 0 = any
  // Where the data plane listens: "" or "ucx:" (the UCX worker, whose
  // address Hello hands out), or "inproc:NAME" with an in-process
  // `transport`.
  std::string data_listen;
  // Data-plane transport; nullptr = UCX, owned by the server.
  transport::Transport* transport = nullptr;
  // Threads reading chunk records for GetChunk (each read is one O_DIRECT
  // request, so this is the disk's queue depth for loads). 8: on the 2-core
  // VM a cold load of the gpt layout took a median 0.69 s with 2, 0.63 s
  // with 4 or 8 (server/README.md).
  int read_threads = 8;
  // Threads that run control-plane calls (gRPC), pollers included. At
  // most this many calls run at once; a call that comes while every one is
  // busy is answered RESOURCE_EXHAUSTED "Server Threadpool Exhausted" without
  // being run, and clients repeat it after a backoff (server/README.md,
  // "Many clients"). Bounded so that thousands of ranks committing in the
  // same second cannot make the server create a thread each.
  int control_threads = 32;
  // The failure domain this server is in (a node, a rack), told to clients
  // in Hello: they place a chunk's copies in distinct domains. Empty: a
  // domain of its own.
  std::string domain;
  // The node (machine) this server runs on, told to clients in Hello: a
  // client puts its first copy on a server of its own node. Empty: the
  // host name.
  std::string node;
  // The memory tier (server/memory_tier.h): at most this many bytes of
  // chunks put with durability "memory" held in RAM, served from there and
  // written to disk behind, each `write_behind_delay_ms` after it came
  // (0: at once; fault drills hold chunks in memory only for a while).
  // 0: no memory tier.
  uint64_t memory_bytes = 0;
  int64_t write_behind_delay_ms = 0;
  // The tier's RAM is mapped and faulted at start in buffers for chunks of
  // this size (the clients' chunk_size; 0: no prefill).
  uint64_t memory_prefill_chunk_bytes = 4 << 20;
  uint64_t segment_bytes = 1ull << 30;
  // Segments of what a save stores (which the next save's rebase replaces)
  // roll past this, so that they die whole: SegmentStoreOptions.
  uint64_t short_segment_bytes = 64ull << 20;
  // Retention: when a step completes, keep only the newest `keep_last`
  // complete steps of its job (0: keep everything), as `stagger gc` does,
  // sparing chunks written in the last `gc_grace_ms`.
  uint32_t keep_last = 0;
  int64_t gc_grace_ms = 600 * 1000;
  // A step that a commit left partial and that is still partial this long
  // after is logged once, naming the ranks missing (0: never).
  int64_t partial_warn_ms = 600 * 1000;
  // After every gc of a job, compact its sealed segments whose live bytes
  // are below this fraction of their size (0: never compact), copying at
  // most `compact_bytes_per_s` (0: unlimited).
  double compact_threshold = 0.5;
  uint64_t compact_bytes_per_s = 64ull << 20;
  // And while a job's segments hold more than this many times its live
  // bytes, the emptiest of the others too (CompactorOptions::
  // max_space_amp; 0: no bound).
  double compact_space_amp = 1.2;
  // Rebase deltas in the background (server/rebaser.h): the newest version
  // of each chunk stays whole, older ones become deltas of their
  // successors. false: deltas are stored as they come (clients then cut
  // their chains every delta_chain_max saves).
  bool rebase_deltas = true;
  // Admission (docs/design.md §5): bytes clients may have inside the server at
  // once, pulled but not yet written (checkpoint payloads) or being read and
  // sent (restore reads, which go first). Must be > 0; one chunk larger
  // than this is still taken when it is alone.
  uint64_t ingest_budget_bytes = 256ull << 20;
  // PEM certificate chain and private key: gRPC over TLS. Both or neither.
  std::string tls_cert_file, tls_key_file;
  // Per-job tokens (server/auth.h). Without them the server refuses to
  // listen on anything but loopback addresses, unless `insecure`.
  std::string auth_tokens_file;
  bool insecure = false;
  // How this server reaches the others to confirm memory-level shards on
  // their disks (server/promoter.h): a file whose first line is a token
  // allowed every job there (needed when they check tokens), and the PEM
  // roots to trust their TLS certificates (default: --tls-cert's chain,
  // for servers sharing one certificate). TLS when this server serves it.
  std::string peer_token_file;
  std::string peer_tls_ca_file;
  // Payloads from and to clients on this host move by cross-memory attach
  // (transport::UcxTransportOptions::cross_memory): this server reads and
  // writes their buffers directly. Off: it never does (clients that may
  // ptrace it still can move bytes in and out of its buffers that way).
  bool cross_memory = true;
  // HOST:PORT for the Prometheus metrics page (GET /metrics); empty: none.
  std::string metrics_listen;
  // The segments' file system; nullptr = io_uring (POSIX where refused).
  // Not owned; tests pass a FaultInjectionFileSystem. Must outlive the
  // server.
  FileSystem* file_system = nullptr;
  // RocksDB's file access for the metadata (DATA/meta); nullptr = its
  // default. Not owned; tests pass one that injects faults
  // (server/testing/fault_injection_rocks_fs.h). Must outlive the server.
  rocksdb::Env* meta_env = nullptr;
  // The durable tier (server/tier/): complete steps are drained to this
  // store in the background, at low priority (client traffic first), at
  // most `drain_bytes_per_s` (0: no cap). Not owned; nullptr: no tier.
  // stagger-server makes one from --rados-pool or --s3-bucket.
  tier::ObjectStore* cold_store = nullptr;
  uint64_t drain_bytes_per_s = 0;
  // Retention there: the newest `cold_keep` steps of each job (0: all),
  // sparing unneeded chunks written within gc_grace_ms.
  uint32_t cold_keep = 0;
  // How often the server lists the store for steps other servers stored
  // there, to serve them without a restart (0: only at start).
  int64_t cold_import_ms = 30000;
};

class Server {
 public:
  // Opens the stores and starts listening. INVALID_ARGUMENT for a bad
  // address, UNAVAILABLE when a port is taken, the store's error otherwise.
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options);
  // Shuts down if still running.
  ~Server();

  // Stops accepting requests, finishes those in flight (their replies are
  // sent), makes everything durable and closes the stores. Idempotent.
  void Shutdown();

  std::string grpc_address() const;  // "host:port" actually bound
  std::string data_address() const;  // "host:port" or "inproc:name"
  // "host:port" of the metrics page actually bound; empty without one.
  std::string metrics_address() const;
  // Admission queue depth, credit in use and per-client bytes in flight
  // (ingest_admission.h); all zero after Shutdown.
  AdmissionStats admission_stats() const;
  // The rebaser's books (server/rebaser.h); all zero without one.
  RebaserStats rebaser_stats() const;
  // Blocks until every delta stored so far has been rebased (tests).
  void WaitRebased();
  // The drain to the cold store (server/tier/drainer.h); all zero without
  // one. WaitDrained: true once every complete step is in the cold store,
  // false after `timeout_ms` or without one (tests).
  tier::DrainerStats drainer_stats() const;
  bool WaitDrained(int64_t timeout_ms);

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_SERVER_H_
