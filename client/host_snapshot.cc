#include "client/host_snapshot.h"

#include "client/staging_copy.h"

namespace stagger::client {
namespace {

class HostSnapshotSource : public SnapshotSource {
 public:
  explicit HostSnapshotSource(int threads) : copiers_(threads) {}

  Status Fence(void*) override { return absl::OkStatus(); }

  void Copy(char* dst, const char* src, size_t len, CopyCallback captured,
            CopyCallback on_host) override {
    copiers_.Submit([dst, src, len, captured = std::move(captured),
                     on_host = std::move(on_host)] {
      CopyToStaging(dst, src, len);
      captured(absl::OkStatus());
      on_host(absl::OkStatus());
    });
  }

  Status RegisterStaging(void*, size_t) override { return absl::OkStatus(); }
  void UnregisterStaging(void*) override {}

 private:
  Executor copiers_;
};

}  // namespace

std::unique_ptr<SnapshotSource> NewHostSnapshotSource(int copy_threads) {
  return std::make_unique<HostSnapshotSource>(copy_threads);
}

}  // namespace stagger::client
