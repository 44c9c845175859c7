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

namespace {

// The dtypes stagger stores: the one table of their names and sizes.
struct Dtype {
  std::string_view name;
  uint8_t size;
  bool is_float;
};
constexpr Dtype kDtypes[] = {
    {"F64", 8, true},   {"F32", 4, true},  {"F16", 2, true},  {"BF16", 2, true},
    {"I64", 8, false},  {"I32", 4, false}, {"I16", 2, false}, {"I8", 1, false},
    {"U64", 8, false},  {"U32", 4, false}, {"U16", 2, false}, {"U8", 1, false},
    {"BOOL", 1, false},
};

const Dtype* FindDtype(std::string_view d) {
  for (const Dtype& t : kDtypes) {
    if (t.name == d) return &t;
  }
  return nullptr;
}

}  // namespace

Result<size_t> DtypeSize(std::string_view d) {
  if (const Dtype* t = FindDtype(d)) return t->size;
  std::string known;
  for (const Dtype& t : kDtypes) {
    absl::StrAppend(&known, known.empty() ? "" : " ", AsAbsl(t.name));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", AsAbsl(d), "' (known: ", known, ")"));
}

int FloatElementSize(std::string_view d) {
  const Dtype* t = FindDtype(d);
  return t != nullptr && t->is_float ? t->size : 0;
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
