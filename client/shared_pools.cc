#include "client/shared_pools.h"

#include <map>
#include <tuple>

#include "absl/synchronization/mutex.h"

namespace stagger::client {

std::shared_ptr<Executor> SharedPool(const std::string& name, int threads,
                                     bool idle,
                                     const std::function<void()>& init) {
  using Key = std::tuple<std::string, int, bool>;
  static absl::Mutex* mu = new absl::Mutex();
  static auto* pools = new std::map<Key, std::weak_ptr<Executor>>();
  absl::MutexLock l(mu);
  for (auto it = pools->begin(); it != pools->end();) {
    it = it->second.expired() ? pools->erase(it) : std::next(it);
  }
  std::weak_ptr<Executor>& slot = (*pools)[Key{name, threads, idle}];
  std::shared_ptr<Executor> pool = slot.lock();
  if (pool == nullptr) {
    pool = std::make_shared<Executor>(threads, name, idle ? init : nullptr);
    slot = pool;
  }
  return pool;
}

}  // namespace stagger::client
