// The rows of an output box along its last axis, numbered row-major over the leading axes, so
// kernels can split them across threads and address each from its number alone.
#pragma once

#include <cstdint>

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

}  // namespace tessera::cpu
