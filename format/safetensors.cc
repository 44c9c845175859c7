#include "format/safetensors.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "format/internal/endian.h"
#include "format/names.h"

namespace stagger::format {
namespace {

// JSON string literal; names are validated, metadata values may be anything.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrCat("\\u00", c < 0x10 ? "0" : "",
                          absl::Hex(static_cast<int>(c)));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

Result<std::string> SafetensorsHeader(
    const std::vector<SafetensorsEntry>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool mfirst = true;
    for (const auto& [k, v] : metadata) {
      if (!mfirst) json += ",";
      mfirst = false;
      json += Quote(k) + ":" + Quote(v);
    }
    json += "}";
    first = false;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const SafetensorsEntry& t : tensors) {
    STAGGER_RETURN_IF_ERROR(ValidateName("tensor", t.name));
    if (!seen.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' appears twice"));
    }
    STAGGER_ASSIGN_OR_RETURN(uint64_t bytes, TensorBytes(t.dtype, t.shape));
    if (bytes != t.byte_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "': ", t.byte_size,
          " bytes do not match its dtype and shape (", bytes, ")"));
    }
    if (!first) json += ",";
    first = false;
    json += Quote(t.name) + ":{\"dtype\":" + Quote(t.dtype) + ",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) json += ",";
      json += absl::StrCat(t.shape[i]);
    }
    json += absl::StrCat("],\"data_offsets\":[", offset, ",",
                         offset + t.byte_size, "]}");
    offset += t.byte_size;
  }
  json += "}";
  while (json.size() % 8 != 0) json += ' ';
  std::string out(8, '\0');
  format_internal::PutLE<uint64_t>(out.data(), json.size());
  return out + json;
}

}  // namespace stagger::format
