#include "format/names.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace stagger::format {

Status ValidateName(std::string_view what, std::string_view name) {
  // "." and ".." match the pattern but would name directories on disk.
  bool ok = !name.empty() && name.size() <= kMaxNameLength && name != "." &&
            name != "..";
  for (char c : name) {
    if (!ok) break;
    ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  }
  if (!ok) {
    std::string shown(name.substr(0, 160));
    return absl::InvalidArgumentError(
        absl::StrCat("invalid ", AsAbsl(what), " name '", shown,
                     "': must match [A-Za-z0-9._-]{1,128} and not be . or .."));
  }
  return absl::OkStatus();
}

Result<size_t> DtypeSize(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", AsAbsl(d),
      "' (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL)"));
}

Result<uint64_t> TensorBytes(std::string_view dtype,
                             const std::vector<int64_t>& shape) {
  STAGGER_ASSIGN_OR_RETURN(size_t esize, DtypeSize(dtype));
  if (shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("shape has ", shape.size(),
                                                   " dimensions, at most ",
                                                   kMaxRank, " allowed"));
  }
  uint64_t n = esize;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "negative dimension in shape [", absl::StrJoin(shape, ","), "]"));
    }
    if (d != 0 && n > kMaxTensorBytes / static_cast<uint64_t>(d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ","),
                       "] is larger than ", kMaxTensorBytes, " bytes"));
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

Status ValidateSlice(const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& global_shape,
                     const std::vector<int64_t>& global_offset) {
  if (global_shape.empty() && global_offset.empty()) return absl::OkStatus();
  if (global_shape.size() != shape.size() ||
      global_offset.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global shape [", absl::StrJoin(global_shape, ","), "] and offset [",
        absl::StrJoin(global_offset, ","), "] must have the rank of shape [",
        absl::StrJoin(shape, ","), "]"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (global_offset[i] < 0 || global_shape[i] < 0 ||
        global_offset[i] > global_shape[i] - shape[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slice [", absl::StrJoin(shape, ","), "] at offset [",
          absl::StrJoin(global_offset, ","), "] does not fit global shape [",
          absl::StrJoin(global_shape, ","), "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace stagger::format
