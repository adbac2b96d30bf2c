// MemoryPool's backends and device constants: one backend instance per name and thread count
// for all sessions of the pool, and each constant uploaded once per device.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "engine/memory_pool.h"

namespace tessera {

std::shared_ptr<Backend> MemoryPool::backend(const std::string& key, absl::FunctionRef<std::unique_ptr<Backend>()> make) {
  std::shared_ptr<Backend>& slot = backends_[key];
  if (slot == nullptr) slot = make();
  return slot;
}

absl::StatusOr<BufferHandle> MemoryPool::device_constant(Backend& backend, const void* data, int64_t bytes,
                                                         int64_t& uploaded) {
  uploaded = 0;
  const auto key = std::make_pair(static_cast<const Backend*>(&backend), data);
  if (auto it = device_constants_.find(key); it != device_constants_.end()) return it->second;
  absl::StatusOr<BufferHandle> buffer = backend.allocate(bytes);
  if (!buffer.ok()) return buffer.status();
  // A dense copy of the bytes: a one-dimensional region of bytes (as I8-sized elements would be)
  // is expressed with the dtype of the smallest element that divides the size.
  const DType dtype = bytes % 4 == 0 ? DType::F32 : DType::Bool;
  const int64_t count = bytes / dtype_size(dtype);
  const Box all{{0, count}};
  if (absl::Status st = backend.copy_in(BufferRegion{*buffer, 0, dtype, all}, all, data); !st.ok()) {
    backend.free(*buffer);
    return st;
  }
  device_constants_[key] = *buffer;
  stats_.device_weight_bytes += bytes;
  uploaded = bytes;
  return *buffer;
}

// Device copies first (their backends must still exist), then the backends.
void MemoryPool::release_devices() {
  for (auto& [key, buffer] : device_constants_) const_cast<Backend*>(key.first)->free(buffer);
  device_constants_.clear();
  backends_.clear();
}

}  // namespace tessera
