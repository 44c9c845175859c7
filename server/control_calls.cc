#include "server/control_calls.h"

#include <grpcpp/support/server_interceptor.h>

#include <cstring>

namespace stagger::server {
namespace {

// Counts at creation, once per rpc, and intercepts nothing.
class CountingFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(ControlCalls* calls) : calls_(calls) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    calls_->Add(info->method());
    return nullptr;
  }

 private:
  ControlCalls* const calls_;
};

}  // namespace

void ControlCalls::Install(grpc::ServerBuilder& builder) {
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      creators;
  creators.push_back(std::make_unique<CountingFactory>(this));
  builder.experimental().SetInterceptorCreators(std::move(creators));
}

void ControlCalls::Add(const char* full_method) {
  // "/stagger.pb.Stagger/CommitShard" -> "CommitShard".
  const char* slash =
      full_method == nullptr ? nullptr : std::strrchr(full_method, '/');
  std::string name = slash == nullptr ? "unknown" : std::string(slash + 1);
  absl::MutexLock l(&mu_);
  // Methods are the service's, but the map stays bounded whatever names
  // reach it.
  if (counts_.size() >= kMaxMethods && counts_.count(name) == 0) {
    name = "other";
  }
  ++counts_[name];
}

std::map<std::string, uint64_t> ControlCalls::Counts() const {
  absl::MutexLock l(&mu_);
  return counts_;
}

}  // namespace stagger::server
