// Byte-exact copy helpers shared by the CPU copy kernels (copy.cc, movement.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/view.h"

namespace tessera::cpu {

// Copies n elements of `size` bytes, element i from src + i * src_step to dst + i * dst_step
// (steps in elements); one memcpy when both sides are contiguous.
inline void copy_run(std::byte* dst, int64_t dst_step, const std::byte* src, int64_t src_step, int64_t n, int64_t size) {
  if (dst_step == 1 && src_step == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n * size));
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + i * dst_step * size, src + i * src_step * size, static_cast<size_t>(size));
}

// The address of the element at `index` of a view whose elements are `size` bytes.
inline std::byte* element(const TensorView& view, const int64_t* index, int64_t size) {
  return static_cast<std::byte*>(view.data) + view.offset(index) * size;
}

}  // namespace tessera::cpu
