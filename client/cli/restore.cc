// `stagger restore` and `stagger verify`.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/chunk_io.h"
#include "client/cli/commands.h"
#include "client/cli/session.h"
#include "client/control.h"
#include "format/safetensors.h"

namespace stagger::client {
namespace {

Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
}

// Fetches every tensor of `shard` into a new safetensors file at `path`:
// written to a temporary name, synced, then renamed, so a crash never leaves
// a file that looks complete and is not.
Status WriteShard(ChunkIo& io, ServerSet* servers,
                  const pb::ShardManifest& shard, const std::string& path) {
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

  std::string tmp = path + ".partial";
  int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno("create " + tmp);
  Status s;
  void* map = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    s = Errno("resize " + tmp);
  } else {
    map = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) s = Errno("map " + tmp);
  }
  if (s.ok()) {
    char* base = static_cast<char*>(map);
    std::memcpy(base, header.data(), header.size());
    std::vector<FetchItem> items;
    uint64_t off = header.size();
    for (const pb::TensorEntry& t : shard.tensors()) {
      for (int i = 0; i < t.chunks_size(); ++i) {
        const pb::ChunkRef& c = t.chunks(i);
        items.push_back(
            {&c, base + off, &servers->ForSlot(shard.rank(), t.name(), i)});
        off += c.raw_length();
      }
    }
    s = io.Fetch(items, nullptr);
    if (s.ok() && msync(map, total, MS_SYNC) != 0) s = Errno("sync " + tmp);
  }
  if (map != MAP_FAILED) munmap(map, total);
  if (s.ok() && fsync(fd) != 0) s = Errno("sync " + tmp);
  close(fd);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    s = Errno("rename to " + path);
  }
  if (!s.ok()) unlink(tmp.c_str());
  return s;
}

Result<pb::GetStepReply> CompleteStep(Session& session, const std::string& job,
                                      const std::string& step_text) {
  STAGGER_ASSIGN_OR_RETURN(int64_t step, ParseStep(step_text));
  STAGGER_ASSIGN_OR_RETURN(pb::GetStepReply reply,
                           GetStep(*session.servers, job, step, true, {}));
  if (!reply.step().complete()) {
    return absl::NotFoundError(
        absl::StrCat("step ", reply.step().step(), " of job '", job,
                     "' is not complete (", reply.step().committed_ranks_size(),
                     " of ", reply.step().world_size(), " ranks committed)"));
  }
  return reply;
}

}  // namespace

int RunRestore(const RestoreArgs& a) {
  auto session = OpenSession(a.server);
  if (!session.ok()) return Fail("restore", session.status());
  auto reply = CompleteStep(*session, a.job, a.step);
  if (!reply.ok()) return Fail("restore", reply.status());
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) {
    return Fail("restore", absl::FailedPreconditionError(absl::StrCat(
                               "cannot create ", a.out, ": ", ec.message())));
  }
  ChunkIo io(session->servers.get(), session->executor.get(), a.job, "raw", {},
             16);
  uint64_t bytes = 0;
  for (const pb::ShardManifest& shard : reply->shards()) {
    std::string path =
        absl::StrFormat("%s/rank-%05d.safetensors", a.out, shard.rank());
    Status s = WriteShard(io, session->servers.get(), shard, path);
    if (!s.ok()) {
      return Fail("restore",
                  WithContext(s, absl::StrCat("rank ", shard.rank())));
    }
    for (const auto& t : shard.tensors()) bytes += t.byte_size();
    printf("wrote %s\n", path.c_str());
  }
  printf("restored job '%s' step %lld: %d ranks, %llu bytes\n", a.job.c_str(),
         static_cast<long long>(reply->step().step()), reply->shards_size(),
         static_cast<unsigned long long>(bytes));
  return 0;
}

int RunVerify(const VerifyArgs& a) {
  auto session = OpenSession(a.server);
  if (!session.ok()) return Fail("verify", session.status());
  auto reply = CompleteStep(*session, a.job, a.step);
  if (!reply.ok()) return Fail("verify", reply.status());
  ChunkIo io(session->servers.get(), session->executor.get(), a.job, "raw", {},
             16);
  std::vector<FetchItem> items;
  std::vector<std::string> labels;
  uint64_t bytes = 0;
  for (const pb::ShardManifest& shard : reply->shards()) {
    for (const pb::TensorEntry& t : shard.tensors()) {
      for (int i = 0; i < t.chunks_size(); ++i) {
        items.push_back(
            {&t.chunks(i), nullptr,
             &session->servers->ForSlot(shard.rank(), t.name(), i)});
        labels.push_back(absl::StrCat("rank ", shard.rank(), " tensor '",
                                      t.name(), "' chunk ", i));
        bytes += t.chunks(i).raw_length();
      }
    }
  }
  std::mutex mu;
  size_t bad = 0;
  Status first = io.Fetch(items, [&](size_t i, const Status& s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    ++bad;
    printf("BAD %s: %s: %s\n", labels[i].c_str(),
           absl::StatusCodeToString(s.code()).c_str(),
           std::string(s.message()).c_str());
  });
  long long step = static_cast<long long>(reply->step().step());
  if (bad > 0 || !first.ok()) {
    printf("verify job '%s' step %lld: %zu of %zu chunks bad\n", a.job.c_str(),
           step, bad, items.size());
    return 1;
  }
  printf("verify job '%s' step %lld: all %zu chunks good (%llu bytes)\n",
         a.job.c_str(), step, items.size(),
         static_cast<unsigned long long>(bytes));
  return 0;
}

}  // namespace stagger::client
