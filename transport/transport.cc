#include "transport/transport.h"

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"

namespace stagger::transport {

bool DataPath::cross_memory() const {
  for (absl::string_view name : absl::StrSplit(payloads, ',')) {
    if (absl::StartsWith(name, "cma/")) return true;
  }
  return false;
}

std::string DataPath::ToString() const {
  return absl::StrCat("payloads by ", payloads.empty() ? "?" : payloads,
                      ", messages by ", messages.empty() ? "?" : messages);
}

Result<Message> Connection::CallSync(uint16_t op, std::string_view header,
                                     std::string_view payload) {
  absl::Notification done;
  std::optional<Result<Message>> result;
  Call(op, header, payload, [&](Result<Message> r) {
    result.emplace(std::move(r));
    done.Notify();
  });
  done.WaitForNotification();
  return *std::move(result);
}

Result<std::pair<std::string, uint16_t>> SplitHostPort(std::string_view addr) {
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address \"",
                     absl::string_view(addr.data(), addr.size()), "\": ", why));
  };
  std::string_view host;
  std::string_view port;
  if (!addr.empty() && addr.front() == '[') {
    // "[v6-address]:port"
    size_t close = addr.find(']');
    if (close == std::string_view::npos) return bad("unterminated '['");
    host = addr.substr(1, close - 1);
    if (close + 1 >= addr.size() || addr[close + 1] != ':') {
      return bad("expected ':port' after ']'");
    }
    port = addr.substr(close + 2);
  } else {
    size_t colon = addr.rfind(':');
    if (colon == std::string_view::npos) return bad("missing ':port'");
    host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return bad("IPv6 hosts must be written as [host]:port");
    }
  }
  if (host.empty()) return bad("empty host");
  if (port.empty()) return bad("empty port");
  for (char c : port) {
    if (c < '0' || c > '9') return bad("port is not a decimal number");
  }
  uint32_t value = 0;
  if (port.size() > 5 ||
      !absl::SimpleAtoi(absl::string_view(port.data(), port.size()), &value) ||
      value > 65535) {
    return bad("port is out of range 0-65535");
  }
  return std::make_pair(std::string(host), static_cast<uint16_t>(value));
}

}  // namespace stagger::transport
