#include "transport/internal/ucx_lanes.h"

#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace stagger::transport_internal {

namespace {

// One "lane[1]:  4:cma/memory.0 md[3]  -> md[3]/cma/sysdev[255] rma_bw#0"
// line: its "tl/device" and whether it has `role` ("am", "am_bw#0", ...).
struct Lane {
  std::string name;
  std::vector<std::string> roles;
  bool Has(absl::string_view prefix) const {
    for (const auto& r : roles) {
      if (r == prefix || absl::StartsWith(r, absl::StrCat(prefix, "#"))) {
        return true;
      }
    }
    return false;
  }
};

bool ParseLane(absl::string_view line, Lane* lane) {
  const size_t at = line.find("lane[");
  if (at == absl::string_view::npos) return false;
  line.remove_prefix(at);
  const size_t colon = line.find("]:");
  if (colon == absl::string_view::npos) return false;
  line.remove_prefix(colon + 2);
  const size_t arrow = line.find("->");
  if (arrow == absl::string_view::npos) return false;
  std::vector<absl::string_view> local =
      absl::StrSplit(line.substr(0, arrow), ' ', absl::SkipEmpty());
  std::vector<absl::string_view> remote =
      absl::StrSplit(line.substr(arrow + 2), ' ', absl::SkipEmpty());
  if (local.empty() || remote.empty()) return false;
  // "4:cma/memory.0": resource index, transport/device, interface index.
  absl::string_view rsc = local[0];
  const size_t index_end = rsc.find(':');
  if (index_end != absl::string_view::npos) rsc.remove_prefix(index_end + 1);
  const size_t dot = rsc.rfind('.');
  if (dot != absl::string_view::npos) rsc = rsc.substr(0, dot);
  if (rsc.find('/') == absl::string_view::npos) return false;
  lane->name = std::string(rsc);
  lane->roles.clear();
  for (size_t i = 1; i < remote.size(); ++i) {
    lane->roles.emplace_back(remote[i]);  // remote[0] is md[..]/tl/sysdev
  }
  return true;
}

void AddOnce(std::vector<std::string>* names, const std::string& name) {
  for (const auto& n : *names) {
    if (n == name) return;
  }
  names->push_back(name);
}

}  // namespace

transport::DataPath ParseEndpointInfo(std::string_view whole) {
  const absl::string_view text(whole.data(), whole.size());
  std::vector<std::string> messages, rma, am_bw;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    Lane lane;
    if (!ParseLane(line, &lane)) continue;
    if (lane.Has("am")) AddOnce(&messages, lane.name);
    if (lane.Has("rma_bw")) AddOnce(&rma, lane.name);
    if (lane.Has("am_bw")) AddOnce(&am_bw, lane.name);
  }
  transport::DataPath path;
  path.messages = absl::StrJoin(messages, ",");
  path.payloads = absl::StrJoin(rma.empty() ? am_bw : rma, ",");
  return path;
}

transport::DataPath DescribeEndpoint(ucp_ep_h ep) {
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (f == nullptr) return {};
  ucp_ep_print_info(ep, f);
  fclose(f);
  transport::DataPath path = ParseEndpointInfo(std::string_view(text, len));
  free(text);
  return path;
}

}  // namespace stagger::transport_internal
