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

// Copies box `src_box` of `src` to box `dst_box` of `dst` (the same extents; elements of `size`
// bytes). Inner axes over which both views hold the box contiguously are one run (whole
// channels of a feature map: one memcpy each), and the outer axes are walked incrementally:
// a small box of many short rows costs little more than its bytes.
inline void copy_box(const TensorView& dst, const Box& dst_box, const TensorView& src, const Box& src_box, int64_t size) {
  const int rank = dst_box.rank();
  if (dst_box.empty()) return;
  int64_t dst_at[kMaxRank], src_at[kMaxRank];
  for (int d = 0; d < rank; ++d) {
    dst_at[d] = dst_box.begin(d);
    src_at[d] = src_box.begin(d);
  }
  std::byte* const dst_base = element(dst, dst_at, size);
  const std::byte* const src_base = element(src, src_at, size);
  if (rank == 0) {
    std::memcpy(dst_base, src_base, static_cast<size_t>(size));
    return;
  }
  const int last = rank - 1;
  const int64_t dst_step = dst.strides[static_cast<size_t>(last)], src_step = src.strides[static_cast<size_t>(last)];
  // Axes [inner, rank) form one run of `run` elements.
  int inner = last;
  int64_t run = dst_box.extent(last);
  if (dst_step == 1 && src_step == 1)
    while (inner > 0 && dst.strides[static_cast<size_t>(inner - 1)] == run && src.strides[static_cast<size_t>(inner - 1)] == run)
      run *= dst_box.extent(--inner);
  int64_t count[kMaxRank] = {};  // position along each outer axis
  int64_t dst_offset = 0, src_offset = 0;
  while (true) {
    copy_run(dst_base + dst_offset * size, dst_step, src_base + src_offset * size, src_step, run, size);
    int d = inner - 1;
    for (; d >= 0; --d) {
      const size_t k = static_cast<size_t>(d);
      dst_offset += dst.strides[k];
      src_offset += src.strides[k];
      if (++count[d] < dst_box.extent(d)) break;
      dst_offset -= dst.strides[k] * count[d];
      src_offset -= src.strides[k] * count[d];
      count[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace tessera::cpu
