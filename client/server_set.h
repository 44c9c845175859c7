// ServerSet: the client's view of the storage servers of a job. For each
// server it holds a gRPC stub (control plane) and a data-plane connection
// (learned through Hello), and it places chunks and manifests on servers by
// rendezvous hashing, so every client and the CLI agree on where a chunk is
// without asking anyone.
//
// With replicas, each chunk lives on the first R servers of its ranking
// (rendezvous scores of its slot over every server, highest first) that
// are up; a server found dead is marked down and the next one in the
// ranking takes its place. Down is not forever: a background thread
// re-probes each down server (Hello, then a new data connection with a new
// key) with capped exponential backoff, 0.25 s doubling to 30 s with
// jitter, and a server that answers is used again; AwaitUp() probes at
// once for callers that cannot go on without it.
//
// Thread-safety: the server list is immutable after Connect; down marks
// are atomic; a server's data connection is swapped under its mutex; all
// methods are thread-safe.
#ifndef STAGGER_CLIENT_SERVER_SET_H_
#define STAGGER_CLIENT_SERVER_SET_H_

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "format/chunk_id.h"
#include "proto/stagger.grpc.pb.h"
#include "stagger/status.h"
#include "transport/transport.h"

namespace stagger::client {

struct ServerConn {
  std::string address;  // gRPC host:port as given
  std::unique_ptr<pb::Stagger::Stub> stub;
  std::string token;  // sent with every control-plane call (may be empty)
  // Found dead (did not answer, or a call failed as a dead server's do):
  // skipped until a probe finds it back.
  std::atomic<bool> down{false};
  absl::Mutex mu;
  std::string down_reason ABSL_GUARDED_BY(mu);
  absl::Time down_since ABSL_GUARDED_BY(mu);
  absl::Time next_probe ABSL_GUARDED_BY(mu);
  absl::Duration backoff ABSL_GUARDED_BY(mu);
  // A probe of this server is running (the prober's or AwaitUp's): one at
  // a time, so that a server is never dialled twice at once.
  std::atomic<bool> probing{false};
  // Codec values below this the server takes (HelloReply::codec_count; 4
  // for a server that does not say): newer delta codecs go only to servers
  // that know them.
  std::atomic<uint32_t> codec_count{4};
  // The server rebases deltas (HelloReply::rebases_deltas): chains of
  // deltas sent to it need no cut.
  std::atomic<bool> rebases_deltas{false};
  // The server answers GetRange (HelloReply::serves_ranges): a load that
  // needs part of a chunk may ask for that part alone.
  std::atomic<bool> serves_ranges{false};
  // The server takes GetChunk's size hint (HelloReply::takes_size_hints).
  std::atomic<bool> takes_size_hints{false};
  // The server takes a whole put's previous version
  // (HelloReply::takes_previous).
  std::atomic<bool> takes_previous{false};
  // HelloReply::memory_bytes > 0: puts of saves with durability "memory"
  // carry the flag that lets it acknowledge them from RAM.
  std::atomic<bool> memory_tier{false};
  // HelloReply::instance of the server process last said Hello to.
  std::atomic<uint64_t> instance{0};
  // HelloReply::domain: copies of a chunk go to distinct domains.
  std::string domain ABSL_GUARDED_BY(mu);
  // HelloReply::node: the machine it runs on.
  std::string node ABSL_GUARDED_BY(mu);
  // DataPath::ToString() of the data connection, as last logged.
  std::string data_path ABSL_GUARDED_BY(mu);

  // The data-plane connection; nullptr while the server has never been
  // reached. A caller holds its own reference for as long as it uses it.
  std::shared_ptr<transport::Connection> Data() {
    absl::MutexLock l(&mu);
    return data_;
  }
  void SetData(std::shared_ptr<transport::Connection> data) {
    absl::MutexLock l(&mu);
    data_ = std::move(data);
  }

 private:
  std::shared_ptr<transport::Connection> data_ ABSL_GUARDED_BY(mu);
};

// Sets the call's deadline (`timeout_s` from now) and its token metadata.
void PrepareCall(const ServerConn& to, grpc::ClientContext* ctx,
                 double timeout_s);

// True for the errors a server that died or stopped answering gives:
// worth trying the next replica.
bool IsServerGone(const Status& s);

// True for UNAVAILABLE "... timed out ..." (gRPC: "connection attempt timed
// out before receiving SETTINGS frame"): something accepted the connection
// but did not finish the HTTP/2 handshake within the channel's connect
// timeout (250 ms here), as a server on a host where hundreds of ranks
// start at once does. Unlike a refused connection, worth waiting for.
bool IsSlowHandshake(const Status& s);

// gRPC's synchronous server answers RESOURCE_EXHAUSTED "Server Threadpool
// Exhausted" (or "Server Threads Exhausted") when every one of its control
// threads is busy
// (stagger-server --control-threads): the call was not run, and is worth
// repeating. Our own RESOURCE_EXHAUSTED answers (a full disk) are not.
bool IsServerBusy(const grpc::Status& s);

// Sleeps before repeating a call a busy server refused for the
// `attempt`th time (0, 1, ...): 2 ms doubling to 250 ms, with jitter, so
// that thousands of ranks refused together do not come back together.
// False, without sleeping, when that would pass `deadline`. Counts the
// retries (BusyRetries).
bool BackOffWhenBusy(int attempt, absl::Time deadline);
// Calls repeated because a server was busy, in this process.
uint64_t BusyRetries();

// One control-plane call to `to`: `rpc(ctx)` issues it on a context
// prepared (PrepareCall) with what is left of `timeout_s`, and is issued
// again while the server answers busy, until `timeout_s` has passed; then
// the busy answer is returned.
template <typename Rpc>
grpc::Status CallUnlessBusy(const ServerConn& to, double timeout_s, Rpc rpc) {
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;
    PrepareCall(to, &ctx,
                std::max(0.0, absl::ToDoubleSeconds(deadline - absl::Now())));
    grpc::Status s = rpc(&ctx);
    if (!IsServerBusy(s) || !BackOffWhenBusy(attempt, deadline)) return s;
  }
}

class ServerSet {
 public:
  // Says Hello to each server of `servers` (ParseList) and opens its
  // data-plane connection over `transport` (not owned; must outlive the
  // set). INVALID_ARGUMENT for a malformed list, UNAVAILABLE naming the
  // server that does not answer.
  // With `tls_ca_file` (PEM), the control plane is gRPC over TLS and the
  // servers' certificates must chain to it. With `tolerate_down`, servers
  // that do not answer are marked down instead (a warning is logged for
  // each), as long as one answers. `token` (servers with --auth-tokens)
  // goes with every call, and the data-plane key Hello returns is presented
  // on each data connection.
  static Result<std::shared_ptr<ServerSet>> Connect(
      const std::string& servers, transport::Transport* transport,
      double timeout_s, const std::string& tls_ca_file = "",
      bool tolerate_down = false, const std::string& token = "");
  // "host:port[,host:port...]": each address parses, none twice.
  // INVALID_ARGUMENT naming what is wrong.
  static Result<std::vector<std::string>> ParseList(const std::string& servers);

  size_t size() const { return servers_.size(); }
  ServerConn& server(size_t i) { return *servers_[i]; }
  // Every server, ranked for chunk `index` of `rank`'s tensor `tensor`:
  // every version of that chunk (and so every delta with its base) lives
  // on the first R that are up, whatever its bytes. Rankings put servers
  // of distinct failure domains first (placement.h).
  // With `node` (the writer's, ShardManifest::node), the best-ranked
  // server of that node comes first (local first: a rank's first copy is
  // on its own node where a server runs there); the others keep their
  // order.
  std::vector<ServerConn*> ForSlot(uint32_t rank, const std::string& tensor,
                                   uint64_t index,
                                   const std::string& node = "") const;
  // A reader's order of a ranking whose first `copies` servers hold the
  // chunk: one of those on this client's node goes first (a read from the
  // node's own RAM or disk), the rest keep their order.
  std::vector<ServerConn*> LocalFirst(std::vector<ServerConn*> placed,
                                      size_t copies) const;
  // The node this client runs on (CheckpointerOptions::node); empty: none
  // named, nothing is local.
  void SetLocalNode(std::string node) { local_node_ = std::move(node); }
  // $STAGGER_NODE, else the host name (what stagger-server --node defaults
  // to).
  static std::string DefaultNode();
  const std::string& local_node() const { return local_node_; }
  // Every server, ranked for `job`'s manifests: the first R that are up
  // are its coordinators.
  std::vector<ServerConn*> Coordinators(const std::string& job) const;
  ~ServerSet();
  // Marks `s` down because of `why` (once; later calls are ignored) and
  // logs it; the background prober takes it from there.
  static void MarkDown(ServerConn* s, const Status& why);
  // Marks down every server whose data connection has failed (a server that
  // restarted or died since the last call), so that the next call goes to
  // a fresh connection or to the next server instead of failing.
  void NoteBrokenConnections();
  // Probes every down server at once, and again every 100 ms, until at
  // least `needed` are up or `wait` has passed. OK when `needed` are up;
  // otherwise UNAVAILABLE naming each down server, how long it has been
  // down and why, and that it is being retried in the background.
  Status AwaitUp(size_t needed, absl::Duration wait);
  size_t up() const;
  // Servers whose data connection moves payloads by cross-memory attach.
  size_t cross_memory() const;
  // How many times a server with a memory tier answered Hello as a new
  // process (HelloReply::instance changed): chunks it held in memory only
  // may be gone, and so may the bases of deltas against them.
  uint64_t memory_restarts() const { return memory_restarts_.load(); }
  // The failure domains of the servers up, by name (a server without a
  // domain is one of its own, named by its address).
  std::set<std::string> DomainsUp() const;
  // "a (reason), b (reason)": the servers marked down.
  std::string DownList() const;
  double timeout_s() const { return timeout_s_; }
  // How long a caller that cannot go on without a down server waits for it
  // (CheckpointerOptions::server_wait_s; 0, the default, for the CLI).
  absl::Duration wait() const { return wait_; }
  void set_wait(absl::Duration wait) { wait_ = wait; }

 private:
  // With `first_node`, the best-ranked server of that node first.
  std::vector<ServerConn*> Rank(std::string_view key,
                                const std::string& first_node = "") const;
  // Hello, then the data connection and its key; on success `s` has a new
  // connection (not yet marked up). With `wait_for_ready`, Hello waits
  // (within `timeout_s`) for a channel that is reconnecting.
  Status Dial(ServerConn* s, double timeout_s, bool wait_for_ready);
  // Connect's error for a server that failed its first dial: a deadline
  // named as no answer, a TLS hint, and the other servers down.
  Status DialFailed(const std::string& addr, Status s,
                    const std::string& tls_ca_file) const;
  // One probe of a down server: on success it is up again.
  Status Revive(ServerConn* s);
  void ProbeLoop();

  std::vector<std::unique_ptr<ServerConn>> servers_;
  double timeout_s_ = 60;
  std::atomic<uint64_t> memory_restarts_{0};
  absl::Duration wait_ = absl::ZeroDuration();
  transport::Transport* transport_ = nullptr;
  std::string local_node_;  // set before use (SetLocalNode)

  absl::Mutex probe_mu_;
  bool stopping_ ABSL_GUARDED_BY(probe_mu_) = false;
  std::thread prober_;
};

// grpc::Status -> Status with the same code; the message names `what`.
Status FromGrpc(const grpc::Status& s, std::string_view what);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_SERVER_SET_H_
