// Naming of the segment tree: <dir>/<job>/<id, at least 8 digits>.seg.
#ifndef STAGGER_SERVER_STORAGE_INTERNAL_SEGMENT_FILES_H_
#define STAGGER_SERVER_STORAGE_INTERNAL_SEGMENT_FILES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/storage/file_system.h"
#include "stagger/status.h"

namespace stagger::storage_internal {

// OK when `job` matches [A-Za-z0-9._-]{1,128} and is not "." or ".." (which
// would name the root or its parent); INVALID_ARGUMENT otherwise.
Status ValidateJobName(std::string_view job);

// "00000042.seg" for 42.
std::string SegmentFileName(uint64_t id);
// The id of a segment file name, or nullopt for any other name.
std::optional<uint64_t> ParseSegmentFileName(std::string_view name);

// Ids of the segments in `job_dir`, ascending. NOT_FOUND when the directory
// does not exist.
Result<std::vector<uint64_t>> ListSegmentIds(server::FileSystem* fs,
                                             const std::string& job_dir);

}  // namespace stagger::storage_internal

#endif  // STAGGER_SERVER_STORAGE_INTERNAL_SEGMENT_FILES_H_
