#include "server/storage/internal/segment_files.h"

#include <algorithm>
#include <cstdio>

#include "format/names.h"

namespace stagger::storage_internal {

Status ValidateJobName(std::string_view job) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", job));
  // Both match the name pattern, but as directory names they would put a
  // job's segments in the root or outside it.
  if (job == "." || job == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job name '", AsAbsl(job), "': reserved"));
  }
  return absl::OkStatus();
}

std::string SegmentFileName(uint64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08llu.seg",
                static_cast<unsigned long long>(id));
  return buf;
}

std::optional<uint64_t> ParseSegmentFileName(std::string_view name) {
  constexpr std::string_view kSuffix = ".seg";
  if (name.size() <= kSuffix.size() ||
      name.substr(name.size() - kSuffix.size()) != kSuffix) {
    return std::nullopt;
  }
  std::string_view digits = name.substr(0, name.size() - kSuffix.size());
  if (digits.size() < 8 || digits.size() > 19) return std::nullopt;
  uint64_t id = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  return id;
}

Result<std::vector<uint64_t>> ListSegmentIds(server::FileSystem* fs,
                                             const std::string& job_dir) {
  STAGGER_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           fs->ListDir(job_dir));
  std::vector<uint64_t> ids;
  for (const std::string& name : names) {
    if (auto id = ParseSegmentFileName(name)) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace stagger::storage_internal
