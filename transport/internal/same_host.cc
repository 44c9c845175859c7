#include "transport/internal/same_host.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace stagger::transport_internal {
namespace {

constexpr absl::string_view kOfferMagic = "SHM1";

void PutLe(std::string* out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

// Reads `bytes` little-endian bytes from the front of `*in`; false when it
// is shorter.
bool TakeLe(absl::string_view* in, size_t bytes, uint64_t* value) {
  if (in->size() < bytes) return false;
  *value = 0;
  for (size_t i = 0; i < bytes; ++i) {
    *value |= static_cast<uint64_t>(static_cast<unsigned char>((*in)[i]))
              << (8 * i);
  }
  in->remove_prefix(bytes);
  return true;
}

Status BadOffer(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("malformed shared-memory offer: ", what));
}

}  // namespace

std::string SameHostKey() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (!std::getline(boot, boot_id) || boot_id.empty()) return "";
  std::string key = absl::StrCat("boot=", boot_id, " uid=", geteuid());
  for (const char* ns : {"ipc", "pid", "mnt"}) {
    struct stat st {};
    if (stat(absl::StrCat("/proc/self/ns/", ns).c_str(), &st) != 0) return "";
    absl::StrAppend(&key, " ", ns, "=", st.st_dev, ":", st.st_ino);
  }
  return key;
}

std::string EncodeShmOffer(const ShmOffer& offer) {
  std::string out(kOfferMagic);
  PutLe(&out, offer.host_key.size(), 2);
  out += offer.host_key;
  PutLe(&out, offer.token, 8);
  PutLe(&out, offer.worker_address.size(), 4);
  out += offer.worker_address;
  return out;
}

Result<ShmOffer> DecodeShmOffer(absl::string_view header) {
  if (header.empty()) return absl::NotFoundError("no shared-memory offer");
  if (!absl::ConsumePrefix(&header, kOfferMagic)) {
    return BadOffer("no SHM1 magic");
  }
  ShmOffer offer;
  uint64_t n = 0;
  if (!TakeLe(&header, 2, &n) || header.size() < n) {
    return BadOffer("host key cut short");
  }
  offer.host_key = std::string(header.substr(0, n));
  header.remove_prefix(n);
  if (!TakeLe(&header, 8, &offer.token)) return BadOffer("token cut short");
  if (!TakeLe(&header, 4, &n) || header.size() != n || n == 0) {
    return BadOffer("worker address length does not match what arrived");
  }
  offer.worker_address = std::string(header);
  return offer;
}

std::string EncodeShmToken(uint64_t token) {
  std::string out;
  PutLe(&out, token, 8);
  return out;
}

Result<uint64_t> DecodeShmToken(absl::string_view header) {
  uint64_t token = 0;
  if (header.size() != 8 || !TakeLe(&header, 8, &token)) {
    return BadOffer(absl::StrCat("token of ", header.size(), " bytes, not 8"));
  }
  return token;
}

}  // namespace stagger::transport_internal
