// Shared by engine/session.cc and engine/session_read.cc only; not part of the API.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>

#include "engine/session.h"
#include "kernels/ref/access.h"

namespace tessera {

struct GraphSession::Value {
  std::byte* buffer = nullptr;  // from the pool: kept values and inputs (returned by drop())
  MemoryPool::Use use = MemoryPool::Use::Kept;
  TensorView view;    // over buffer, the arena (transients during a read) or constant data
  int64_t bytes = 0;  // size of buffer
};

using PoolLock = std::lock_guard<std::recursive_mutex>;

// Copies `box` between a view and a dense row-major buffer of that box, one contiguous run of
// the innermost dimension at a time.
inline void copy_box(const TensorView& view, const Box& box, std::byte* dense, bool to_view) {
  const int64_t size = dtype_size(view.dtype);
  const int rank = box.rank();
  if (box.empty()) return;
  const int64_t run = rank == 0 ? 1 : box.extent(rank - 1);
  const bool contiguous = rank == 0 || view.strides[rank - 1] == 1;
  int64_t k = 0;
  auto copy_run = [&](const int64_t* index) {
    std::byte* p = static_cast<std::byte*>(view.data) + view.offset(index) * size;
    if (contiguous) {
      if (to_view) std::memcpy(p, dense + k * size, static_cast<size_t>(run * size));
      else std::memcpy(dense + k * size, p, static_cast<size_t>(run * size));
      k += run;
      return;
    }
    for (int64_t j = 0; j < run; ++j, ++k) {
      std::byte* q = p + j * view.strides[rank - 1] * size;
      if (to_view) std::memcpy(q, dense + k * size, static_cast<size_t>(size));
      else std::memcpy(dense + k * size, q, static_cast<size_t>(size));
    }
  };
  if (rank == 0) {
    int64_t none = 0;
    copy_run(&none);
    return;
  }
  Box rows = box;
  rows[rank - 1] = Interval(box.begin(rank - 1), box.begin(rank - 1) + 1);
  ref::for_each_index(rows, copy_run);
}

}  // namespace tessera
