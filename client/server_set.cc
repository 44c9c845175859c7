#include "client/server_set.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/placement.h"
#include "format/data_plane.h"
#include "util/log.h"

namespace stagger::client {

Status FromGrpc(const grpc::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return Status(static_cast<absl::StatusCode>(s.error_code()),
                absl::StrCat(AsAbsl(what), ": ", s.error_message()));
}

Status ServerSet::Dial(ServerConn* conn, double timeout_s,
                       bool wait_for_ready) {
  const std::string& addr = conn->address;
  pb::HelloRequest req;
  req.set_client("stagger client");
  pb::HelloReply reply;
  STAGGER_RETURN_IF_ERROR(
      FromGrpc(CallUnlessBusy(*conn, timeout_s,
                              [&](grpc::ClientContext* ctx) {
                                ctx->set_wait_for_ready(wait_for_ready);
                                return conn->stub->Hello(ctx, req, &reply);
                              }),
               absl::StrCat("server ", addr)));
  const std::string where = absl::StrCat("data plane of server ", addr);
  // A connection that fails to come up (UCX's tcp connect refused while
  // many ranks connect at once) is tried again, twice, after 50-100 ms and
  // 100-200 ms: the server answered Hello, so it is there.
  // Without a data key (an open server) the process's ranks share one
  // connection to the server (Transport::ConnectShared); with one, each
  // binds its own.
  auto connect = [&] {
    return reply.data_key().empty()
               ? transport_->ConnectShared(reply.data_address())
               : transport_->Connect(reply.data_address());
  };
  auto connected = connect();
  for (int again = 0;
       again < 2 && !connected.ok() && absl::IsUnavailable(connected.status());
       ++again) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    absl::SleepFor(absl::Milliseconds(
        (50 << again) * std::uniform_real_distribution<double>(1, 2)(rng)));
    connected = connect();
  }
  if (!connected.ok()) return WithContext(connected.status(), where);
  if (!reply.data_key().empty()) {
    // Binds this connection to our token's grant on the server.
    auto r = (*connected)
                 ->CallSync(static_cast<uint16_t>(format::DataOp::kAuth),
                            reply.data_key(), std::string_view());
    Status a = r.status();
    if (a.ok()) {
      auto d = format::DecodeReply(r->header);
      a = d.ok() ? d->status : d.status();
    }
    STAGGER_RETURN_IF_ERROR_CTX(a, where, ": key from Hello");
  }
  conn->codec_count = reply.codec_count() == 0 ? 4 : reply.codec_count();
  conn->rebases_deltas = reply.rebases_deltas();
  conn->serves_ranges = reply.serves_ranges();
  conn->takes_size_hints = reply.takes_size_hints();
  conn->takes_previous = reply.takes_previous();
  conn->memory_tier = reply.memory_bytes() > 0;
  const uint64_t was = conn->instance.exchange(reply.instance());
  if (was != 0 && was != reply.instance() && conn->memory_tier) {
    ++memory_restarts_;
  }
  {
    absl::MutexLock l(&conn->mu);
    conn->domain = reply.domain();
    conn->node = reply.node();
  }
  // Said once per server, and again when a reconnect takes another path.
  const std::string path = (*connected)->path().ToString();
  bool changed;
  {
    absl::MutexLock l(&conn->mu);
    changed = conn->data_path != path;
    conn->data_path = path;
  }
  if (changed) log::Info("stagger", absl::StrCat(where, ": ", path));
  conn->SetData(std::shared_ptr<transport::Connection>(std::move(*connected)));
  return absl::OkStatus();
}

namespace {

// The control plane's credentials: TLS trusting the CA in `tls_ca_file`,
// or plaintext without one.
Result<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const std::string& tls_ca_file) {
  if (tls_ca_file.empty()) return grpc::InsecureChannelCredentials();
  std::ifstream f(tls_ca_file);
  std::stringstream pem;
  pem << f.rdbuf();
  if (!f || pem.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS CA file '", tls_ca_file, "' cannot be read or is empty"));
  }
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = pem.str();
  return grpc::SslCredentials(o);
}

std::unique_ptr<pb::Stagger::Stub> Stub(
    const std::string& addr,
    const std::shared_ptr<grpc::ChannelCredentials>& creds) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  // A restarted server is found again within a few seconds, not after
  // gRPC's default backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return pb::Stagger::NewStub(grpc::CreateCustomChannel(addr, creds, args));
}

}  // namespace

Status ServerSet::DialFailed(const std::string& addr, Status s,
                             const std::string& tls_ca_file) const {
  if (absl::IsDeadlineExceeded(s)) {
    s = absl::UnavailableError(
        absl::StrCat("server ", addr, " does not answer"));
  }
  if (!tls_ca_file.empty() && absl::IsUnavailable(s)) {
    s = WithContext(s, absl::StrCat("(TLS with CA ", tls_ca_file,
                                    ": does the server's certificate "
                                    "chain to it and name this host?)"));
  }
  if (up() < size()) {
    s = WithContext(
        s, absl::StrCat("(", size() - up(),
                        " other server(s) down too: ", DownList(), ")"));
  }
  return s;
}

Result<std::shared_ptr<ServerSet>> ServerSet::Connect(
    const std::string& servers, transport::Transport* transport,
    double timeout_s, const std::string& tls_ca_file, bool tolerate_down,
    const std::string& token) {
  STAGGER_ASSIGN_OR_RETURN(auto creds, Credentials(tls_ca_file));
  STAGGER_ASSIGN_OR_RETURN(std::vector<std::string> addrs, ParseList(servers));
  auto set = std::shared_ptr<ServerSet>(new ServerSet());
  set->timeout_s_ = timeout_s;
  set->transport_ = transport;
  for (const std::string& addr : addrs) {
    auto conn = std::make_unique<ServerConn>();
    conn->address = addr;
    conn->stub = Stub(addr, creds);
    conn->token = token;
    // Without waiting, so that a port nobody listens on fails at once; a
    // server slow to finish the handshake is waited for, up to the timeout.
    const double dial_s = std::min(timeout_s, 30.0);
    Status s = set->Dial(conn.get(), dial_s, /*wait_for_ready=*/false);
    if (IsSlowHandshake(s)) {
      log::Info("stagger", absl::StrCat("server ", addr,
                                        " is slow to answer; waiting up to ",
                                        dial_s, " s: ", s.message()));
      s = set->Dial(conn.get(), dial_s, /*wait_for_ready=*/true);
    }
    if (!s.ok() && !(IsServerGone(s) && tolerate_down)) {
      return set->DialFailed(addr, s, tls_ca_file);
    }
    // A server down is ranked still (the others' order must not change);
    // it is skipped as down until a probe finds it.
    if (!s.ok()) MarkDown(conn.get(), s);
    set->servers_.push_back(std::move(conn));
  }
  if (set->up() == 0) {
    return absl::UnavailableError(
        absl::StrCat("no server answers: ", set->DownList()));
  }
  set->prober_ = std::thread([raw = set.get()] { raw->ProbeLoop(); });
  return set;
}

ServerSet::~ServerSet() {
  {
    absl::MutexLock l(&probe_mu_);
    stopping_ = true;
  }
  if (prober_.joinable()) prober_.join();
}

Status ServerSet::Revive(ServerConn* s) {
  if (s->probing.exchange(true)) {
    return absl::UnavailableError(
        absl::StrCat("server ", s->address, ": a probe is under way"));
  }
  // Waits for the channel: right after a restart it is still in its
  // reconnect backoff, and a call without waiting fails at once. A call
  // that went out on the connection to the old process fails with "Socket
  // closed" before the channel knows it is gone: the second try waits for
  // the new connection.
  const double timeout_s = std::min(timeout_s_, 2.0);
  Status st = Dial(s, timeout_s, /*wait_for_ready=*/true);
  if (absl::IsUnavailable(st)) {
    st = Dial(s, timeout_s, /*wait_for_ready=*/true);
  }
  s->probing = false;
  if (!st.ok()) return st;
  absl::Duration down_for;
  {
    absl::MutexLock l(&s->mu);
    down_for = absl::Now() - s->down_since;
    s->down = false;
  }
  log::Info("stagger", absl::StrCat("server ", s->address, " is back after ",
                                    absl::FormatDuration(absl::Trunc(
                                        down_for, absl::Milliseconds(10)))));
  return absl::OkStatus();
}

void ServerSet::ProbeLoop() {
  std::mt19937_64 rng(std::random_device{}());
  for (;;) {
    {
      absl::MutexLock l(&probe_mu_);
      // Wakes every 50 ms to look for servers due; stops at once.
      probe_mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                                 absl::Milliseconds(50));
      if (stopping_) return;
    }
    for (auto& s : servers_) {
      if (!s->down) continue;
      {
        absl::MutexLock l(&s->mu);
        if (absl::Now() < s->next_probe) continue;
      }
      if (Revive(s.get()).ok()) continue;
      absl::MutexLock l(&s->mu);
      // 0.25 s doubling to 30 s, each wait drawn from [0.5, 1.0] of it so
      // that the clients of a job do not probe in step.
      s->backoff = std::min(absl::Seconds(30), s->backoff * 2);
      std::uniform_real_distribution<double> jitter(0.5, 1.0);
      s->next_probe = absl::Now() + s->backoff * jitter(rng);
    }
  }
}

void ServerSet::NoteBrokenConnections() {
  for (auto& s : servers_) {
    if (s->down) continue;
    std::shared_ptr<transport::Connection> data = s->Data();
    if (data != nullptr && data->broken()) {
      MarkDown(s.get(),
               absl::UnavailableError(absl::StrCat(
                   "server ", s->address, ": its data connection was lost")));
    }
  }
}

Status ServerSet::AwaitUp(size_t needed, absl::Duration wait) {
  const absl::Time until = absl::Now() + wait;
  for (;;) {
    for (auto& s : servers_) {
      if (s->down) Revive(s.get()).IgnoreError();  // why is in DownList
    }
    if (up() >= needed) return absl::OkStatus();
    if (absl::Now() >= until) break;
    absl::SleepFor(std::min(absl::Milliseconds(100), until - absl::Now()));
  }
  std::string down;
  for (auto& s : servers_) {
    if (!s->down) continue;
    absl::MutexLock l(&s->mu);
    absl::StrAppend(&down, down.empty() ? "" : ", ", s->address, " (down for ",
                    absl::FormatDuration(absl::Trunc(
                        absl::Now() - s->down_since, absl::Milliseconds(100))),
                    ": ", s->down_reason, ")");
  }
  return absl::UnavailableError(
      absl::StrCat("needs ", needed, " servers up; ", up(), " of ", size(),
                   " are after waiting ", absl::FormatDuration(wait),
                   " (down: ", down, "; retried in the background)"));
}

void PrepareCall(const ServerConn& to, grpc::ClientContext* ctx,
                 double timeout_s) {
  ctx->set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  if (!to.token.empty()) ctx->AddMetadata("x-stagger-token", to.token);
}

Result<std::vector<std::string>> ServerSet::ParseList(
    const std::string& servers) {
  if (servers.empty()) return absl::InvalidArgumentError("no servers given");
  std::vector<std::string> addrs = absl::StrSplit(servers, ',');
  for (size_t i = 0; i < addrs.size(); ++i) {
    auto hp = transport::SplitHostPort(addrs[i]);
    if (!hp.ok()) return WithContext(hp.status(), "servers");
    if (std::find(addrs.begin(), addrs.begin() + i, addrs[i]) !=
        addrs.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("servers: ", addrs[i], " is listed twice"));
    }
  }
  return addrs;
}

bool IsServerGone(const Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsCancelled(s);
}

bool IsSlowHandshake(const Status& s) {
  return absl::IsUnavailable(s) &&
         absl::StrContains(absl::AsciiStrToLower(s.message()), "timed out");
}

namespace {
std::atomic<uint64_t> busy_retries{0};
}  // namespace

bool IsServerBusy(const grpc::Status& s) {
  // The first when no thread is left to run the call, the second when
  // none could be made for it (gRPC 1.51's server_cc.cc).
  return s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
         (s.error_message() == "Server Threadpool Exhausted" ||
          s.error_message() == "Server Threads Exhausted");
}

bool BackOffWhenBusy(int attempt, absl::Time deadline) {
  const double cap_ms = std::min(250.0, 2.0 * (1 << std::min(attempt, 7)));
  thread_local std::mt19937_64 rng(std::random_device{}());
  const absl::Duration wait = absl::Microseconds(
      std::uniform_real_distribution<double>(cap_ms * 500, cap_ms * 1000)(rng));
  if (absl::Now() + wait >= deadline) return false;
  busy_retries.fetch_add(1, std::memory_order_relaxed);
  absl::SleepFor(wait);
  return true;
}

uint64_t BusyRetries() { return busy_retries.load(std::memory_order_relaxed); }

std::vector<ServerConn*> ServerSet::Rank(std::string_view key,
                                         const std::string& first_node) const {
  std::vector<std::pair<uint64_t, size_t>> scored;
  for (size_t i = 0; i < servers_.size(); ++i) {
    std::string k(key);
    k += '|';
    k += servers_[i]->address;
    scored.emplace_back(XXH3_64bits(k.data(), k.size()), i);
  }
  // Highest score first; ties (never in practice) by list order.
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<ServerConn*> ranked;
  std::vector<std::string> domains;
  bool local_moved = first_node.empty();
  for (const auto& [score, i] : scored) {
    ServerConn* s = servers_[i].get();
    absl::MutexLock l(&s->mu);
    if (!local_moved && s->node == first_node) {
      // Local first: the best-ranked server of the writer's node leads.
      ranked.insert(ranked.begin(), s);
      domains.insert(domains.begin(), s->domain);
      local_moved = true;
      continue;
    }
    ranked.push_back(s);
    domains.push_back(s->domain);
  }
  std::vector<ServerConn*> out;
  for (size_t at : SpreadOverDomains(domains)) out.push_back(ranked[at]);
  return out;
}

std::vector<ServerConn*> ServerSet::ForSlot(uint32_t rank,
                                            const std::string& tensor,
                                            uint64_t index,
                                            const std::string& node) const {
  return Rank(absl::StrCat("slot:", rank, "/", index, "/", tensor), node);
}

std::string ServerSet::DefaultNode() {
  if (const char* env = std::getenv("STAGGER_NODE"); env != nullptr && *env) {
    return env;
  }
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::vector<ServerConn*> ServerSet::LocalFirst(std::vector<ServerConn*> placed,
                                               size_t copies) const {
  if (local_node_.empty()) return placed;
  for (size_t i = 0; i < placed.size() && i < copies; ++i) {
    absl::MutexLock l(&placed[i]->mu);
    if (placed[i]->node != local_node_) continue;
    std::rotate(placed.begin(), placed.begin() + static_cast<ptrdiff_t>(i),
                placed.begin() + static_cast<ptrdiff_t>(i) + 1);
    break;
  }
  return placed;
}

std::vector<ServerConn*> ServerSet::Coordinators(const std::string& job) const {
  return Rank("job:" + job);
}

void ServerSet::MarkDown(ServerConn* s, const Status& why) {
  absl::MutexLock l(&s->mu);
  if (s->down) return;
  s->down_reason = std::string(why.message());
  s->down_since = absl::Now();
  s->backoff = absl::Milliseconds(250);
  s->next_probe = s->down_since + s->backoff;
  s->down = true;
  log::Warning("stagger", absl::StrCat("server ", s->address,
                                       " marked down: ", why.message()));
}

std::set<std::string> ServerSet::DomainsUp() const {
  std::set<std::string> domains;
  for (const auto& s : servers_) {
    if (s->down) continue;
    absl::MutexLock l(&s->mu);
    domains.insert(s->domain.empty() ? s->address : s->domain);
  }
  return domains;
}

size_t ServerSet::up() const {
  size_t n = 0;
  for (const auto& s : servers_) n += s->down ? 0 : 1;
  return n;
}

size_t ServerSet::cross_memory() const {
  size_t n = 0;
  for (const auto& s : servers_) {
    auto data = s->Data();
    n += data != nullptr && data->path().cross_memory() ? 1 : 0;
  }
  return n;
}

std::string ServerSet::DownList() const {
  std::string out;
  for (const auto& s : servers_) {
    if (!s->down) continue;
    absl::MutexLock l(&s->mu);
    absl::StrAppend(&out, out.empty() ? "" : ", ", s->address, " (",
                    s->down_reason, ")");
  }
  return out;
}

}  // namespace stagger::client
