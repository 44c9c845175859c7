#include "client/checkpointer_impl.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/chunk_io.h"
#include "client/control.h"
#include "client/server_set.h"
#include "format/names.h"
#include "transport/ucx_transport.h"

namespace stagger {

// The state a SaveHandle shares with the save that fills it.
class SaveHandle::State {
 public:
  explicit State(int64_t step) : step_(step) {}
  void Finish(const Status& s, const SaveStats& stats) {
    absl::MutexLock lock(&mu_);
    status_ = s;
    stats_ = stats;
    done_ = true;
  }
  Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }
  bool Done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  SaveStats stats() {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  int64_t step() const { return step_; }

 private:
  const int64_t step_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  Status status_ ABSL_GUARDED_BY(mu_);
  SaveStats stats_ ABSL_GUARDED_BY(mu_);
};

SaveHandle::SaveHandle(std::shared_ptr<State> state)
    : state_(std::move(state)) {}
Status SaveHandle::Wait() const { return state_->Wait(); }
bool SaveHandle::Done() const { return state_->Done(); }
SaveStats SaveHandle::stats() const { return state_->stats(); }
int64_t SaveHandle::step() const { return state_->step(); }

namespace client {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       since)
      .count();
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ","), "]");
}

class CheckpointerImpl : public Checkpointer {
 public:
  CheckpointerImpl(const CheckpointerOptions& options,
                   std::shared_ptr<void> keepalive,
                   std::shared_ptr<transport::Transport> transport,
                   std::shared_ptr<ServerSet> servers)
      : options_(options),
        keepalive_(std::move(keepalive)),
        transport_(std::move(transport)),
        servers_(std::move(servers)),
        executor_(std::clamp<int>(std::thread::hardware_concurrency(), 1, 8)),
        io_(servers_.get(), &executor_, options.job,
            options.codec == "raw" ? format::Codec::kRaw : format::Codec::kZstd,
            format::EncodeOptions{options.zstd_level},
            options.max_inflight_chunks) {}

  Status Register(const TensorSpec& t) override {
    STAGGER_RETURN_IF_ERROR(format::ValidateName("tensor", t.name));
    auto bytes = format::TensorBytes(t.dtype, t.shape);
    if (!bytes.ok()) {
      return WithContext(bytes.status(), absl::StrCat("tensor '", t.name, "'"));
    }
    Status slice =
        format::ValidateSlice(t.shape, t.global_shape, t.global_offset);
    if (!slice.ok()) {
      return WithContext(slice, absl::StrCat("tensor '", t.name, "'"));
    }
    if (t.data == nullptr && *bytes > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' has no data pointer"));
    }
    if (t.device == Device::kCuda) {
      return absl::UnimplementedError(absl::StrCat(
          "tensor '", t.name, "' is on a CUDA device; this build saves host "
          "memory only"));
    }
    if (tensors_.count(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' is already registered"));
    }
    tensors_.emplace(t.name, Registered{t, *bytes});
    return absl::OkStatus();
  }

  void ClearRegistrations() override { tensors_.clear(); }

  Result<SaveHandle> Save(int64_t step) override {
    if (step < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("step must be >= 0, got ", step));
    }
    auto start = std::chrono::steady_clock::now();
    auto state = std::make_shared<SaveHandle::State>(step);
    pb::ShardManifest m;
    m.set_job(options_.job);
    m.set_step(step);
    m.set_rank(options_.rank);
    m.set_world_size(options_.world_size);
    m.set_chunk_size(options_.chunk_size);
    m.set_created_unix_ms(NowMs());
    std::vector<PutSpan> spans;
    for (const auto& [name, reg] : tensors_) {
      pb::TensorEntry* e = m.add_tensors();
      e->set_name(name);
      e->set_dtype(reg.spec.dtype);
      for (int64_t d : reg.spec.shape) e->add_shape(d);
      for (int64_t d : reg.spec.global_shape) e->add_global_shape(d);
      for (int64_t d : reg.spec.global_offset) e->add_global_offset(d);
      e->set_byte_size(reg.bytes);
      const char* base = static_cast<const char*>(reg.spec.data);
      for (uint64_t off = 0; off < reg.bytes; off += options_.chunk_size) {
        e->add_chunks();
      }
      size_t i = 0;
      for (uint64_t off = 0; off < reg.bytes; off += options_.chunk_size, ++i) {
        size_t len = std::min<uint64_t>(options_.chunk_size, reg.bytes - off);
        spans.push_back({base + off, len, e->mutable_chunks(i)});
      }
    }
    PutStats put;
    Status s = WithContext(io_.PutChunks(spans, &put),
                           absl::StrCat("save of job '", options_.job,
                                        "' step ", step, " rank ",
                                        options_.rank));
    SaveStats stats;
    stats.bytes_raw = put.bytes_raw;
    stats.bytes_shipped = put.bytes_shipped;
    stats.chunks = put.chunks;
    if (s.ok()) {
      pb::ShardStats* ss = m.mutable_stats();
      ss->set_bytes_raw(stats.bytes_raw);
      ss->set_bytes_shipped(stats.bytes_shipped);
      ss->set_chunks(stats.chunks);
      ss->set_durable_s(Seconds(start));
      ss->set_stall_s(Seconds(start));
      s = CommitShard(*servers_, m).status();
    }
    stats.durable_s = Seconds(start);
    stats.stall_s = stats.durable_s;  // saving blocks until durable
    state->Finish(s, stats);
    return SaveHandle(state);
  }

  Result<int64_t> Load(int64_t step) override {
    STAGGER_ASSIGN_OR_RETURN(
        pb::GetStepReply reply,
        GetStep(*servers_, options_.job, step, false, {options_.rank}));
    if (!reply.step().complete()) {
      return absl::NotFoundError(absl::StrCat(
          "step ", reply.step().step(), " of job '", options_.job,
          "' is not complete (", reply.step().committed_ranks_size(), " of ",
          reply.step().world_size(), " ranks committed)"));
    }
    if (reply.step().world_size() != options_.world_size) {
      return absl::UnimplementedError(absl::StrCat(
          "step ", reply.step().step(), " was saved by ",
          reply.step().world_size(), " ranks; loading it with ",
          options_.world_size, " ranks needs resharding, not yet supported"));
    }
    if (reply.shards_size() != 1) {
      return absl::DataLossError("coordinator returned no manifest");
    }
    const pb::ShardManifest& shard = reply.shards(0);
    std::map<std::string, const pb::TensorEntry*> saved;
    for (const pb::TensorEntry& t : shard.tensors()) saved[t.name()] = &t;
    std::vector<FetchItem> items;
    for (const auto& [name, reg] : tensors_) {
      auto it = saved.find(name);
      if (it == saved.end()) {
        return absl::NotFoundError(absl::StrCat(
            "tensor '", name, "' is not in step ", shard.step(), " of job '",
            options_.job, "' rank ", options_.rank));
      }
      const pb::TensorEntry& e = *it->second;
      std::vector<int64_t> shape(e.shape().begin(), e.shape().end());
      if (e.dtype() != reg.spec.dtype || shape != reg.spec.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name, "' was saved as ", e.dtype(), ShapeStr(shape),
            " but is registered as ", reg.spec.dtype,
            ShapeStr(reg.spec.shape)));
      }
      char* base = static_cast<char*>(reg.spec.data);
      uint64_t off = 0;
      for (const pb::ChunkRef& c : e.chunks()) {
        items.push_back({&c, base + off});
        off += c.raw_length();
      }
    }
    STAGGER_RETURN_IF_ERROR(WithContext(
        io_.Fetch(items, nullptr),
        absl::StrCat("load of job '", options_.job, "' step ", shard.step(),
                     " rank ", options_.rank)));
    return shard.step();
  }

  Result<std::vector<StepSummary>> Steps(bool include_partial) override {
    STAGGER_ASSIGN_OR_RETURN(
        auto steps, ListSteps(*servers_, options_.job, include_partial));
    std::vector<StepSummary> out;
    for (const pb::StepInfo& s : steps) {
      StepSummary x;
      x.step = s.step();
      x.complete = s.complete();
      x.world_size = s.world_size();
      x.ranks_committed = s.committed_ranks_size();
      x.raw_bytes = s.raw_bytes();
      x.stored_bytes = s.stored_bytes();
      out.push_back(x);
    }
    return out;
  }

 private:
  struct Registered {
    TensorSpec spec;
    uint64_t bytes;
  };
  CheckpointerOptions options_;
  // Declaration order is destruction order reversed: connections close
  // before the transport, and both before the embedded server.
  std::shared_ptr<void> keepalive_;
  std::shared_ptr<transport::Transport> transport_;
  std::shared_ptr<ServerSet> servers_;
  qos::Executor executor_;
  ChunkIo io_;
  std::map<std::string, Registered> tensors_;
};

}  // namespace

Status ValidateOptions(const CheckpointerOptions& o) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", o.job));
  if (o.world_size == 0) {
    return absl::InvalidArgumentError("world_size must be at least 1");
  }
  if (o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", o.rank, " must be < world_size ", o.world_size));
  }
  if (o.chunk_size < 4096 || o.chunk_size > (64ull << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_size ", o.chunk_size, " out of range [4096, 64 MiB]"));
  }
  if (o.codec != "zstd" && o.codec != "raw") {
    return absl::InvalidArgumentError(
        absl::StrCat("codec '", o.codec, "' unknown (zstd, raw)"));
  }
  if (o.zstd_level < 1 || o.zstd_level > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("zstd_level ", o.zstd_level, " out of range [1, 19]"));
  }
  if (o.max_inflight_chunks == 0 || o.max_inflight_chunks > 1024) {
    return absl::InvalidArgumentError(
        "max_inflight_chunks must be in [1, 1024]");
  }
  if (!(o.rpc_timeout_s > 0)) {
    return absl::InvalidArgumentError("rpc_timeout_s must be positive");
  }
  return absl::OkStatus();
}

Result<std::shared_ptr<transport::Transport>> SharedUcxTransport() {
  static absl::Mutex mu;
  static std::weak_ptr<transport::Transport>* current =
      new std::weak_ptr<transport::Transport>();
  absl::MutexLock lock(&mu);
  if (auto t = current->lock()) return t;
  STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> t,
                           transport::NewUcxTransport());
  std::shared_ptr<transport::Transport> shared(std::move(t));
  *current = shared;
  return shared;
}

Result<std::unique_ptr<Checkpointer>> NewCheckpointer(
    const CheckpointerOptions& options, const std::string& servers,
    std::shared_ptr<transport::Transport> transport,
    std::shared_ptr<void> keepalive) {
  STAGGER_RETURN_IF_ERROR(ValidateOptions(options));
  if (!transport) {
    STAGGER_ASSIGN_OR_RETURN(transport, SharedUcxTransport());
  }
  STAGGER_ASSIGN_OR_RETURN(
      auto set,
      ServerSet::Connect(servers, transport.get(), options.rpc_timeout_s));
  return std::unique_ptr<Checkpointer>(new CheckpointerImpl(
      options, std::move(keepalive), std::move(transport), std::move(set)));
}

}  // namespace client
}  // namespace stagger
