// `stagger restore`.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/chunk_io.h"
#include "client/cli/commands.h"
#include "client/cli/interrupt.h"
#include "client/cli/progress.h"
#include "client/cli/session.h"
#include "client/control.h"
#include "client/loader.h"
#include "format/crc32c.h"
#include "format/names.h"
#include "format/safetensors.h"
#include "util/json.h"

namespace stagger::client {
namespace {

// A local file-system error with its own code (PERMISSION_DENIED,
// RESOURCE_EXHAUSTED for a full disk, FAILED_PRECONDITION for a path that
// is not a directory, ...): it is no peer's failure.
Status Errno(const std::string& what, int error = errno) {
  return Status(absl::ErrnoToStatusCode(error),
                absl::StrCat(what, ": ", strerror(error)));
}

// Writes a `size`-byte file at `path` through `fill`, which gets the file's
// bytes mapped: to a temporary name, synced, then renamed, so a crash never
// leaves a file that looks complete and is not. Chunks land in the mapping
// as they arrive, so nothing holds a whole tensor in memory.
Status WriteMapped(const std::string& path, uint64_t size,
                   const std::function<Status(char*)>& fill, uint32_t* crc) {
  std::string tmp = path + ".partial";
  RestoreWriting(tmp);
  int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    Status s = Errno("create " + tmp);
    RestoreWriting("");
    return s;
  }
  Status s;
  void* map = MAP_FAILED;
  // The space is taken before the mapping is written: a full disk is then
  // an error here, not a SIGBUS on some page of the mapping.
  int rc = size == 0 ? 0 : posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    rc = ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
  }
  if (rc != 0) {
    s = Errno(absl::StrCat("reserve ", size, " bytes for ", tmp), rc);
  } else {
    map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) s = Errno("map " + tmp);
  }
  if (s.ok()) s = fill(static_cast<char*>(map));
  // The file's checksum for MANIFEST.json, from memory it was just written.
  if (s.ok()) *crc = format::Crc32c(static_cast<char*>(map), size);
  if (s.ok() && msync(map, size, MS_SYNC) != 0) s = Errno("sync " + tmp);
  if (map != MAP_FAILED) munmap(map, size);
  if (s.ok() && fsync(fd) != 0) s = Errno("sync " + tmp);
  close(fd);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    s = Errno("rename to " + path);
  }
  if (!s.ok()) unlink(tmp.c_str());
  RestoreWriting("");
  if (s.ok()) RestoreWrote();
  return s;
}

// Fetches every tensor of `shard` into a new safetensors file at `path`.
Status WriteShard(ChunkIo& io, ServerSet* servers,
                  const pb::ShardManifest& shard, const std::string& path,
                  Progress* progress, uint32_t* crc) {
  std::vector<format::SafetensorsEntry> entries;
  for (const pb::TensorEntry& t : shard.tensors()) {
    entries.push_back({t.name(), t.dtype(),
                       std::vector<int64_t>(t.shape().begin(), t.shape().end()),
                       t.byte_size()});
  }
  STAGGER_ASSIGN_OR_RETURN(
      std::string header,
      format::SafetensorsHeader(
          entries, {{"job", shard.job()},
                    {"step", absl::StrCat(shard.step())},
                    {"rank", absl::StrCat(shard.rank())},
                    {"world_size", absl::StrCat(shard.world_size())}}));
  uint64_t total = header.size();
  for (const pb::TensorEntry& t : shard.tensors()) total += t.byte_size();
  return WriteMapped(
      path, total,
      [&](char* base) {
        std::memcpy(base, header.data(), header.size());
        std::vector<FetchItem> items;
        uint64_t off = header.size();
        for (const pb::TensorEntry& t : shard.tensors()) {
          for (int i = 0; i < t.chunks_size(); ++i) {
            const pb::ChunkRef& c = t.chunks(i);
            items.push_back(
                {&c, base + off,
                 servers->LocalFirst(
                     servers->ForSlot(shard.rank(), t.name(), i, shard.node()),
                     std::max<uint32_t>(1, shard.replicas()))});
            off += c.raw_length();
          }
        }
        return io.Fetch(items, nullptr,
                        [progress](uint64_t n) { progress->Add(n); });
      },
      crc);
}

// Assembles every tensor of the step at its global shape, from the slices
// all ranks saved, into one safetensors file at `path` (tensors in name
// order). A tensor's dtype and global shape come from the lowest rank that
// saved it; a per-rank tensor (saved without a global shape) is that rank's
// copy. Adds the tensors' bytes to `bytes`.
// The name a tensor gets in a consolidated file: with `only` prefixes,
// the part after the prefix it is under, or "" when it is under none (left
// out). stagger.torch's metadata tensors are always left out.
std::string ConsolidatedName(const std::string& name,
                             const std::vector<std::string>& only) {
  // stagger.torch's description of each rank's own state dict: per rank
  // and different on every rank of a sharded job; the file holds the
  // state's tensors.
  if (absl::StartsWith(name, "__stagger_")) return "";
  if (only.empty()) return name;
  for (const std::string& p : only) {
    if (name.size() > p.size() + 1 && absl::StartsWith(name, p) &&
        name[p.size()] == '.') {
      return name.substr(p.size() + 1);
    }
  }
  return "";
}

// A tensor of the file: what to fetch (`target`, the stored name) and where
// it goes (`out`); for a per-rank tensor, every rank that saved it.
struct Placed {
  LoadTarget target;
  std::string out;
  std::vector<const pb::ShardManifest*> per_rank;  // empty: global
};

// Chooses the file's tensors. A sharded tensor is assembled at its global
// shape from every rank's slices. A per-rank one (no global shape) saved
// by several ranks must be the same everywhere (DDP's replicated state is):
// other shapes fail here, other bytes after the fetch.
Result<std::map<std::string, Placed>> PlaceTensors(
    const pb::GetStepReply& reply, const std::vector<std::string>& only) {
  std::map<std::string, Placed> placed;  // by stored name
  std::map<std::string, std::string> by_out;
  for (const pb::ShardManifest& shard : reply.shards()) {
    for (const pb::TensorEntry& t : shard.tensors()) {
      const std::string out = ConsolidatedName(t.name(), only);
      if (out.empty()) continue;
      auto [it, first] = placed.try_emplace(t.name());
      Placed& p = it->second;
      std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
      if (!first) {
        if (!p.per_rank.empty()) {
          if (shape != p.target.shape || t.dtype() != p.target.dtype) {
            return absl::FailedPreconditionError(
                absl::StrCat("tensor '", t.name(),
                             "' is per-rank (no global shape) and "
                             "rank ",
                             shard.rank(),
                             " saved another shape or dtype than "
                             "rank ",
                             p.per_rank.front()->rank(),
                             ": one file cannot "
                             "hold both; restore without --consolidate, or "
                             "leave it out with "
                             "--only"));
          }
          p.per_rank.push_back(&shard);
        }
        continue;
      }
      if (auto [o, fresh] = by_out.emplace(out, t.name()); !fresh) {
        return absl::InvalidArgumentError(
            absl::StrCat("--only: tensors '", o->second, "' and '", t.name(),
                         "' would both be named '", out, "'"));
      }
      p.out = out;
      p.target.name = t.name();
      p.target.dtype = t.dtype();
      p.target.global_shape.assign(t.global_shape().begin(),
                                   t.global_shape().end());
      if (p.target.global_shape.empty()) {
        p.target.shape = shape;
        p.per_rank.push_back(&shard);
      } else {
        p.target.shape = p.target.global_shape;
        p.target.global_offset.assign(p.target.shape.size(), 0);
      }
    }
  }
  if (!only.empty() && placed.empty()) {
    std::set<std::string> tops;
    for (const pb::ShardManifest& shard : reply.shards()) {
      for (const pb::TensorEntry& t : shard.tensors()) {
        if (!absl::StartsWith(t.name(), "__stagger_")) {
          tops.insert(t.name().substr(0, t.name().find('.')));
        }
      }
    }
    return absl::NotFoundError(
        absl::StrCat("--only ", absl::StrJoin(only, ","),
                     " names no tensor of the step; its tensors are under: ",
                     absl::StrJoin(tops, ", ")));
  }
  return placed;
}

// Fetches rank `shard`'s copy of per-rank tensor `t` and compares it with
// `have` (the copy in the file).
Status SameOnRank(ChunkIo& io, ServerSet* servers, const LoadTarget& t,
                  const pb::ShardManifest* shard, const char* have,
                  uint64_t size) {
  std::vector<char> copy(size);
  LoadTarget x = t;
  x.dest = copy.data();
  LoadPlan plan;
  STAGGER_RETURN_IF_ERROR(
      PlanLoad({x}, {shard}, shard->rank(), *servers, &plan));
  STAGGER_RETURN_IF_ERROR(io.Fetch(plan.items, nullptr));
  if (size != 0 && std::memcmp(copy.data(), have, size) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", t.name, "' is per-rank (no global shape) and rank ",
        shard->rank(),
        " saved other values than the rank written: one file "
        "cannot hold both; restore without --consolidate, or leave it out "
        "with --only"));
  }
  return absl::OkStatus();
}

Status WriteConsolidated(ChunkIo& io, ServerSet* servers,
                         const std::string& job, const pb::GetStepReply& reply,
                         const std::vector<std::string>& only,
                         const std::string& path, uint64_t* bytes,
                         Progress* progress, uint32_t* crc) {
  STAGGER_ASSIGN_OR_RETURN(auto placed, PlaceTensors(reply, only));
  // The file lists tensors by their names in it.
  std::map<std::string, Placed*> by_out;
  for (auto& [name, p] : placed) by_out[p.out] = &p;
  std::vector<format::SafetensorsEntry> entries;
  for (const auto& [out, p] : by_out) {
    STAGGER_ASSIGN_OR_RETURN(
        uint64_t n, format::TensorBytes(p->target.dtype, p->target.shape));
    entries.push_back({out, p->target.dtype, p->target.shape, n});
  }
  const pb::StepInfo& step = reply.step();
  std::map<std::string, std::string> meta = {
      {"job", job},
      {"step", absl::StrCat(step.step())},
      {"world_size", absl::StrCat(step.world_size())},
      {"layout", "global"}};
  if (!only.empty()) meta["only"] = absl::StrJoin(only, ",");
  STAGGER_ASSIGN_OR_RETURN(std::string header,
                           format::SafetensorsHeader(entries, meta));
  uint64_t total = header.size();
  for (const format::SafetensorsEntry& e : entries) total += e.byte_size;
  std::vector<const pb::ShardManifest*> shards;
  for (const pb::ShardManifest& m : reply.shards()) shards.push_back(&m);
  STAGGER_RETURN_IF_ERROR(WriteMapped(
      path, total,
      [&](char* base) {
        std::memcpy(base, header.data(), header.size());
        std::vector<LoadTarget> list;
        uint64_t off = header.size();
        size_t i = 0;
        for (auto& [out, p] : by_out) {
          p->target.dest = base + off;
          off += entries[i++].byte_size;
          list.push_back(p->target);
        }
        LoadPlan plan;
        STAGGER_RETURN_IF_ERROR(PlanLoad(list, shards, 0, *servers, &plan));
        uint64_t planned = 0;
        for (const FetchItem& item : plan.items)
          planned += item.ref->raw_length();
        progress->SetTotal(planned);
        STAGGER_RETURN_IF_ERROR(io.Fetch(
            plan.items, nullptr, [progress](uint64_t n) { progress->Add(n); }));
        // Per-rank tensors of several ranks: every copy must be the one
        // written.
        i = 0;
        for (auto& [out, p] : by_out) {
          const uint64_t size = entries[i++].byte_size;
          for (size_t r = 1; r < p->per_rank.size(); ++r) {
            STAGGER_RETURN_IF_ERROR(SameOnRank(
                io, servers, p->target, p->per_rank[r], p->target.dest, size));
          }
        }
        return absl::OkStatus();
      },
      crc));
  *bytes += total - header.size();
  return absl::OkStatus();
}

// One file a restore wrote, for MANIFEST.json.
struct Written {
  std::string file;  // name inside --out
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Writes OUT/MANIFEST.json (to a temporary name, synced, renamed): what was
// restored, from where, and each file's size and CRC32C, so that a
// directory of restored files says what it holds.
Status WriteRestoreManifest(const std::string& out, const std::string& job,
                            const pb::StepInfo& step, bool consolidated,
                            const std::vector<std::string>& only,
                            const std::vector<Written>& files) {
  std::vector<std::string> rows, prefixes;
  for (const Written& w : files) {
    rows.push_back(absl::StrFormat(
        "{\"file\":%s,\"bytes\":%llu,\"crc32c\":\"%08x\"}", JsonQuote(w.file),
        static_cast<unsigned long long>(w.bytes), w.crc32c));
  }
  for (const std::string& p : only) prefixes.push_back(JsonQuote(p));
  const std::string doc =
      absl::StrCat("{\"job\":", JsonQuote(job), ",\"step\":", step.step(),
                   ",\"world_size\":", step.world_size(),
                   ",\"consolidated\":", consolidated ? "true" : "false",
                   ",\"only\":[", absl::StrJoin(prefixes, ","), "],\"files\":[",
                   absl::StrJoin(rows, ","), "]}\n");
  const std::string path = out + "/MANIFEST.json";
  const std::string tmp = path + ".partial";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno("create " + tmp);
  Status s;
  if (write(fd, doc.data(), doc.size()) != static_cast<ssize_t>(doc.size()) ||
      fsync(fd) != 0) {
    s = Errno("write " + tmp);
  }
  close(fd);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    s = Errno("rename to " + path);
  }
  if (!s.ok()) unlink(tmp.c_str());
  return s;
}

// FAILED_PRECONDITION unless `dir` is empty (or does not exist yet): a
// restore into a directory of other files would mix them with its own.
Status CheckEmpty(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return absl::OkStatus();
  size_t n = 0;
  std::string first;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (n++ == 0) first = e.path().filename().string();
  }
  if (n == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "--out ", dir, " is not empty (", n, n == 1 ? " entry" : " entries",
      ", e.g. '", first,
      "'): a restore writes into an empty directory, so "
      "that its files are not mixed with others; pass --force to write "
      "into it anyway"));
}

}  // namespace

Result<pb::GetStepReply> CompleteStep(Session& session, const std::string& job,
                                      const std::string& step_text) {
  STAGGER_ASSIGN_OR_RETURN(int64_t step, ParseStep(step_text));
  STAGGER_ASSIGN_OR_RETURN(pb::GetStepReply reply,
                           GetStep(*session.servers, job, step, true, {}));
  if (!reply.step().complete()) {
    return absl::NotFoundError(absl::StrCat(
        "step ", reply.step().step(), " of job '", job, "' is not complete (",
        reply.step().committed_ranks_size(), " of ", reply.step().world_size(),
        reply.step().world_size() == 1 ? " rank" : " ranks", " committed)"));
  }
  return reply;
}

namespace {

// `--out` made ready: a directory, empty unless --force.
Status PrepareOut(const RestoreArgs& a) {
  std::error_code ec;
  if (std::filesystem::exists(a.out, ec) &&
      !std::filesystem::is_directory(a.out, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--out ", a.out, " exists and is not a directory"));
  }
  if (!a.force) STAGGER_RETURN_IF_ERROR(CheckEmpty(a.out));
  std::filesystem::create_directories(a.out, ec);
  if (ec) return Errno("cannot create --out " + a.out, ec.value());
  return absl::OkStatus();
}

// Raw bytes of every chunk of the step: what the progress counts to.
uint64_t StoredBytes(const pb::GetStepReply& reply) {
  uint64_t stored = 0;
  for (const pb::ShardManifest& shard : reply.shards()) {
    for (const pb::TensorEntry& t : shard.tensors()) {
      for (const pb::ChunkRef& c : t.chunks()) stored += c.raw_length();
    }
  }
  return stored;
}

int RestoreConsolidated(const RestoreArgs& a, Session& session, ChunkIo& io,
                        const pb::GetStepReply& reply, Progress& progress) {
  std::string path = a.out + "/model.safetensors";
  Written w{"model.safetensors"};
  uint64_t bytes = 0;
  Status s = WriteConsolidated(io, session.servers.get(), a.job, reply, a.only,
                               path, &bytes, &progress, &w.crc32c);
  progress.Finish();
  std::error_code ec;
  w.bytes = std::filesystem::file_size(path, ec);
  if (s.ok()) {
    s = WriteRestoreManifest(a.out, a.job, reply.step(), true, a.only, {w});
  }
  if (!s.ok()) {
    return Fail("restore", WithContext(s, absl::StrCat("consolidate of step ",
                                                       reply.step().step())));
  }
  progress.Say(stdout, absl::StrCat("wrote ", path));
  printf("restored job '%s' step %lld: %d ranks consolidated, %llu bytes\n",
         a.job.c_str(), static_cast<long long>(reply.step().step()),
         reply.shards_size(), static_cast<unsigned long long>(bytes));
  return 0;
}

int RestoreShards(const RestoreArgs& a, Session& session, ChunkIo& io,
                  const pb::GetStepReply& reply, Progress& progress) {
  std::vector<Written> written;
  uint64_t bytes = 0;
  for (const pb::ShardManifest& shard : reply.shards()) {
    std::string path =
        absl::StrFormat("%s/rank-%05d.safetensors", a.out, shard.rank());
    Written w{std::filesystem::path(path).filename().string()};
    Status s = WriteShard(io, session.servers.get(), shard, path, &progress,
                          &w.crc32c);
    if (!s.ok()) {
      progress.Finish();
      return Fail("restore",
                  WithContext(s, absl::StrCat("rank ", shard.rank())));
    }
    std::error_code ec;
    w.bytes = std::filesystem::file_size(path, ec);
    written.push_back(w);
    for (const auto& t : shard.tensors()) bytes += t.byte_size();
    progress.Say(stdout, absl::StrCat("wrote ", path));
  }
  progress.Finish();
  if (Status s =
          WriteRestoreManifest(a.out, a.job, reply.step(), false, {}, written);
      !s.ok()) {
    return Fail("restore", s);
  }
  printf("restored job '%s' step %lld: %d %s, %llu bytes\n", a.job.c_str(),
         static_cast<long long>(reply.step().step()), reply.shards_size(),
         reply.shards_size() == 1 ? "rank" : "ranks",
         static_cast<unsigned long long>(bytes));
  return 0;
}

}  // namespace

int RunRestore(const RestoreArgs& a) {
  if (!a.only.empty() && !a.consolidate) {
    return Usage("restore",
                 "--only selects tensors of the consolidated file: it needs "
                 "--consolidate");
  }
  if (auto step = ParseStep(a.step); !step.ok()) {
    return Usage("restore", step.status().message());
  }
  auto session = OpenSession(a.server);
  if (!session.ok()) return Fail("restore", session.status());
  auto reply = CompleteStep(*session, a.job, a.step);
  if (!reply.ok()) return Fail("restore", reply.status());
  if (Status s = PrepareOut(a); !s.ok()) return Fail("restore", s);
  InstallRestoreInterrupts(a.out, a.consolidate ? 1 : reply->shards_size());
  ChunkIo io(session->executor.get(), a.job, CodecChoice::kRaw, {}, 16);
  Progress progress("restore", StoredBytes(*reply));
  return a.consolidate ? RestoreConsolidated(a, *session, io, *reply, progress)
                       : RestoreShards(a, *session, io, *reply, progress);
}

}  // namespace stagger::client
