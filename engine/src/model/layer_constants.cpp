// The constants a layer keeps per device, dtype and shape (Layer::constant).
#include "layer.h"

namespace kestrel {

const Tensor& Layer::constant(const std::string& key, const std::function<Tensor()>& make) const {
  std::lock_guard<std::mutex> lock(constants_mutex_);
  auto found = constants_.find(key);
  if (found == constants_.end()) found = constants_.emplace(key, make()).first;
  return found->second;
}

}  // namespace kestrel
