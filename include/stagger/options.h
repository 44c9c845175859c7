// Options of a stagger::Checkpointer.
#ifndef STAGGER_OPTIONS_H_
#define STAGGER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "stagger/status.h"

namespace stagger {

namespace qos {
class Clock;  // qos/clock.h
}  // namespace qos

// CheckpointerOptions::codec.
enum class CodecChoice { kAuto, kZstd, kByteGroupZstd, kRaw };
// CheckpointerOptions::snapshot_overlap.
enum class SnapshotOverlap { kAuto, kOn, kOff };
// CheckpointerOptions::qos_yield.
enum class QosYield { kOff, kPause, kLearn };
// CheckpointerOptions::durability, SaveOptions::durability: when a save is
// complete. kDisk: every chunk fdatasynced on `replicas` servers. kMemory:
// every chunk held in the RAM of `replicas` servers of as many failure
// domains (stagger-server --memory-bytes, --domain); the step becomes
// disk-level behind. kDefault (SaveOptions only): the Checkpointer's.
enum class Durability { kDefault, kDisk, kMemory };
// CheckpointerOptions::background_cpu.
enum class BackgroundCpu { kIdle, kNormal };

// The names the Python binding, the CLI and the benchmarks take: "auto",
// "zstd", "bytegroup+zstd", "raw"; "auto", "on", "off"; "off", "pause",
// "learn". INVALID_ARGUMENT naming the option, the value and the names
// otherwise.
Result<CodecChoice> ParseCodecChoice(std::string_view name);
Result<SnapshotOverlap> ParseSnapshotOverlap(std::string_view name);
Result<QosYield> ParseQosYield(std::string_view name);
// "disk", "memory" ("default" too, for SaveOptions).
Result<Durability> ParseDurability(std::string_view name);
// "idle", "normal".
Result<BackgroundCpu> ParseBackgroundCpu(std::string_view name);
std::string_view NameOf(CodecChoice c);
std::string_view NameOf(SnapshotOverlap s);
std::string_view NameOf(QosYield y);
std::string_view NameOf(Durability d);
std::string_view NameOf(BackgroundCpu b);

struct CheckpointerOptions {
  // Where checkpoints live: "host:port[,host:port...]" (gRPC addresses of
  // stagger-server daemons), or "embedded:DIR" to run a server inside this
  // process, storing under DIR (shared by every Checkpointer of the process
  // that names the same DIR).
  std::string servers;
  std::string job;          // [A-Za-z0-9._-]{1,128}
  uint32_t rank = 0;        // this process's rank, < world_size
  uint32_t world_size = 1;  // ranks that must commit for a step to exist
  // Copies of every chunk and manifest, each on a different server (1 ..
  // number of servers; 2 recommended with 3 or more servers). A chunk goes
  // to the first `replicas` servers of its rendezvous ranking that are up;
  // when one dies during a save its copies go to the next server in the
  // ranking, and a save fails UNAVAILABLE (naming the servers down) only
  // when fewer than `replicas` servers are left. With replicas > 1, Open
  // goes on while at least one server answers (the others are marked
  // down); loads read any copy. With 1, every server must answer at Open.
  uint32_t replicas = 1;
  // The node (machine) this process runs on; empty: $STAGGER_NODE, else
  // the host name. A save puts the first copy of each chunk on a server
  // whose stagger-server --node is the same, where one is listed (the
  // other copies in other domains), and a load reads that copy first: a
  // trainer restarted on its node restores from the node's own memory.
  std::string node;
  // When a save is complete (Durability above): kDisk (the default), or
  // kMemory, which needs the servers up to span `replicas` failure domains
  // (a save is refused, FAILED_PRECONDITION, otherwise). A memory-level
  // step is made disk-level in the background, once the servers wrote its
  // chunks behind (Checkpointer::WaitDisk); a load takes the newest
  // complete step at either level. A server without a memory tier takes a
  // memory-level put as a disk one.
  Durability durability = Durability::kDisk;
  // A save that starts while fewer than `replicas` servers are up waits up
  // to this long (and never past its deadline) for a down server to come
  // back before it fails with UNAVAILABLE naming the servers down. Down
  // servers are re-probed in the background all the time.
  double server_wait_s = 5;

  uint64_t chunk_size = 4ull << 20;  // bytes per chunk, 4 KiB .. 64 MiB
  // kAuto: per chunk, byte-grouped zstd for floating-point tensors (the
  // bytes of each float grouped by position, so exponent bytes sit
  // together), zstd otherwise, raw when compression does not pay.
  // kZstd, kByteGroupZstd or kRaw force one.
  CodecChoice codec = CodecChoice::kAuto;
  // With kAuto: when encoding, not the link or the storage, limits how
  // fast a save becomes durable, send some chunks raw (the share that
  // makes the save fastest, measured as it runs), so encoding never makes
  // a save slower than sending raw. false: encode every chunk.
  bool adaptive_codec = true;
  // Deltas: a changed chunk is sent as XOR against its previous version
  // (byte-grouped, zstd) when that is smaller. The client keeps the previous
  // version of each chunk for this, and the new one while a save runs:
  // delta_memory_bytes covers half as many bytes of state, the first chunks
  // in tensor order, the same every save (0: physical memory / 8 / the
  // LOCAL_WORLD_SIZE environment variable, at least 64 MiB). Changed chunks
  // beyond it go whole (SaveStats::chunks_no_base). Where a server does not
  // rebase deltas (stagger-server --no-rebase), a chain of deltas is cut by
  // a full chunk every delta_chain_max saves; servers that do keep the
  // newest version whole themselves. delta_chain_max 0 turns deltas off.
  uint64_t delta_memory_bytes = 0;
  int delta_chain_max = 8;
  int zstd_level = 1;
  // Chunks sent and not yet acknowledged durable. The encoders work at
  // most as many chunks again ahead of them.
  size_t max_inflight_chunks = 16;
  double rpc_timeout_s = 60;  // per control-plane call
  // PEM file of the CA that signed the servers' certificates: the control
  // plane (gRPC) then runs over TLS (stagger-server --tls-cert/--tls-key).
  // Empty: plaintext. The data plane (UCX) is not encrypted either way.
  std::string tls_ca_file;
  // Access token for servers run with --auth-tokens: every call carries
  // it, and it must be granted this job. Empty: $STAGGER_TOKEN if set.
  std::string token;
  // HOST:PORT to serve this client's counters at http://HOST:PORT/metrics
  // (Prometheus text format, stagger_client_*; port 0 picks a free one).
  // Empty: no endpoint (Checkpointer::Metrics() still counts).
  std::string metrics_listen;

  // Host staging memory for snapshots (pinned when CUDA is present),
  // allocated once at Open. 0: allocated at the first Save() and grown at
  // a later one, sized to the largest state saved so far, at most physical
  // memory / 8 / LOCAL_WORLD_SIZE (at least 64 MiB; a state larger than
  // that logs once). Never
  // exceeded: a larger state is snapshotted in pieces as earlier pieces
  // drain, and Save() stalls longer (SaveStats::staging_limited says so).
  uint64_t staging_bytes = 0;
  // Saves in flight at once. Another Save() waits for one to finish, or
  // fails with RESOURCE_EXHAUSTED when fail_when_busy is set.
  int max_outstanding_saves = 1;
  bool fail_when_busy = false;
  // Threads fingerprinting, encoding and shipping chunks; 0: the cores
  // this process may use (its affinity mask and cgroup CPU quota, divided
  // among the LOCAL_WORLD_SIZE ranks of the node), at most 8.
  int pipeline_threads = 0;
  // The CPU priority of that work, which runs after the stall while the
  // training loop goes on (qos/README.md, "CPU"):
  //   kIdle    SCHED_IDLE (nice 19 where refused) and the idle I/O class:
  //            it runs only on cycles the training process and its data
  //            loaders leave idle, and pauses while a marked collective
  //            runs (default);
  //   kNormal  the priority of the thread that opened the Checkpointer.
  // The snapshot copies that Save() (or BeforeUpdate()) waits for always
  // run at normal priority.
  BackgroundCpu background_cpu = BackgroundCpu::kIdle;
  // Whether chunks start shipping while the snapshot is still being taken:
  //   kOff   captured chunks wait until the whole snapshot is taken (or the
  //          pool runs dry), so encoding and sending never compete with
  //          the copies Save() waits for;
  //   kOn    each chunk ships as soon as it is captured: durable sooner,
  //          while the copies share the cores and memory with the rest;
  //   kAuto  kOn when the copies leave cores to spare: the state is all
  //          on CUDA devices (their copy engines move it), or the host has
  //          at least twice as many cores as host copy threads (default).
  SnapshotOverlap snapshot_overlap = SnapshotOverlap::kAuto;
  // CUDA: copy device-to-device into spare device memory first, then drain
  // to host, so the stall is the HBM copy. Used only when enough free device
  // memory is available; otherwise the snapshot goes straight to host.
  bool device_snapshot = false;

  // QoS: how checkpoint traffic shares the fabric with training (docs/design.md
  // section 6; qos/README.md). All rates in bytes per second.
  //
  // Deadline pacing: a save should be durable this many seconds after
  // Save() (e.g. the checkpoint interval). The sender spreads the bytes
  // over that time, rate = remaining bytes / remaining time, at least
  // qos_floor_Bps and at most qos_max_Bps (0: no cap). 0: no deadline, send
  // as fast as the other limits allow. SaveOptions::deadline_s overrides it
  // for one save.
  double qos_deadline_s = 0;
  double qos_floor_Bps = 1 << 20;
  double qos_max_Bps = 0;
  // Stagger: with a deadline, ranks start at offsets spread over this share
  // of it (by node first, then rank within the node), so that all ranks do
  // not hit the storage at once. 0: everyone starts at once.
  double qos_stagger = 0.5;
  // Ranks per node, for the stagger and the node rate limit. 0: from the
  // LOCAL_WORLD_SIZE environment variable (as torchrun sets it), else 1.
  uint32_t ranks_per_node = 0;
  // Yield to the training job's collectives (CollectiveBegin/End):
  //   kOff    ignore the marks;
  //   kPause  stop sending while a marked collective runs;
  //   kLearn  also learn the iteration's busy phases from the marks and
  //           stop before a predicted collective starts (default).
  // While yielding the sender stops, or drops to qos_yield_floor_Bps.
  QosYield qos_yield = QosYield::kLearn;
  double qos_yield_floor_Bps = 0;
  // Hard caps set by the operator: this client, and all clients on this
  // host together (shared through /dev/shm). 0: none.
  double rate_limit_Bps = 0;
  double node_rate_limit_Bps = 0;
  // The file holding the node cap's state; every process of the node using
  // the same file shares the cap. Empty: /dev/shm/stagger-node-default.
  std::string node_rate_limit_file;
  // The time QoS runs on (pacing, rate caps, the collective gate, and the
  // yield it reports); not owned, and it must outlive the Checkpointer.
  // nullptr: the steady clock. A seam for tests, as RocksDB's Env is: a
  // qos::SimulatedClock (qos/clock.h) makes a deadline or a collective
  // take no real time.
  qos::Clock* clock = nullptr;
};

// Options of one Save() call.
struct SaveOptions {
  // Return as soon as the copies are enqueued; the caller must call
  // Checkpointer::BeforeUpdate() before modifying any registered tensor.
  bool lazy = false;
  // The caller's CUDA stream (a cudaStream_t) whose queued work the snapshot
  // must see; nullptr is the legacy default stream. Ignored without CUDA.
  void* cuda_stream = nullptr;
  // Deadline of this save in seconds (overrides
  // CheckpointerOptions::qos_deadline_s); negative: use the option.
  double deadline_s = -1;
  // This save's durability; kDefault: CheckpointerOptions::durability.
  Durability durability = Durability::kDefault;
};

}  // namespace stagger

#endif  // STAGGER_OPTIONS_H_
