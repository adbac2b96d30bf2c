// The rows of an output box along its last axis, numbered row-major over the leading axes, so
// kernels can split them across threads and address each from its number alone.
#pragma once

#include <cstdint>

#include "kernels/view.h"
#include "regions/box.h"

namespace tessera::cpu {

class BoxRows {
 public:
  explicit BoxRows(const Box& box) : box_(box), last_(box.rank() - 1) {
    count_ = box.empty() ? 0 : 1;
    for (int d = 0; d < last_; ++d) count_ *= box.extent(d);
  }
  int64_t count() const { return count_; }
  // index[0, rank) = the coordinates of row r, with the last axis at the box's first column.
  void index(int64_t r, int64_t* index) const {
    for (int d = last_ - 1; d >= 0; --d) {
      const int64_t extent = box_.extent(d);
      index[d] = box_.begin(d) + r % extent;
      r /= extent;
    }
    if (last_ >= 0) index[last_] = box_.begin(last_);
  }

 private:
  const Box& box_;
  int last_;
  int64_t count_ = 0;
};

// Whether `view` holds the box's elements as one contiguous run (unit last stride, rows back to
// back: e.g. whole channels of a small feature map), which a kernel may then treat as one row.
inline bool one_run(const TensorView& view, const Box& box) {
  int64_t span = 1;
  for (int d = box.rank() - 1; d >= 0; --d) {
    if (box.extent(d) == 1) continue;
    if (view.strides[static_cast<size_t>(d)] != span) return false;
    span *= box.extent(d);
  }
  return true;
}

}  // namespace tessera::cpu
