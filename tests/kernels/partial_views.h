// Checks for kernels reading through views that hold only part of an input: for random output
// boxes, every input is given as a copy of just the box its op's needed rule names, through a
// strided layout (every stride doubled, so the last axis is not contiguous, or rows padded); the
// result must be bitwise the same elements of a full computation from dense inputs.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/op_def.h"
#include "tests/kernels/kernel_fixture.h"

namespace tessera::kernel_testing {

// A view of `box` of `src` through a fresh buffer (`storage`) with doubled or padded strides;
// elements of the buffer outside the box are NaN.
inline TensorView partial_copy(const TensorView& src, const Box& box, bool double_strides,
                               std::vector<std::byte>& storage) {
  const int64_t size = dtype_size(src.dtype);
  TensorView view;
  view.dtype = src.dtype;
  view.extent = box;
  int64_t stride = double_strides ? 2 : 1;
  for (int d = box.rank() - 1; d >= 0; --d) {
    view.strides[static_cast<size_t>(d)] = stride;
    stride *= box.extent(d) + (double_strides ? 0 : 3);
  }
  storage.assign(static_cast<size_t>(std::max<int64_t>(stride, 1) * size), std::byte{0xff});
  view.data = storage.data();
  ref::for_each_index(box, [&](const int64_t* i) {
    std::memcpy(static_cast<std::byte*>(view.data) + view.offset(i) * size,
                static_cast<const std::byte*>(src.data) + src.offset(i) * size,
                static_cast<size_t>(size));
  });
  return view;
}

inline void check_partial_views(const OpFixture& f, KernelFn kernel, std::mt19937_64& rng,
                                int count = 6) {
  const Node& n = f.node();
  const Box full_box = Box::full(n.shape);
  const std::vector<float> full = f.run(kernel, full_box);
  const TensorView full_view = dense_view(const_cast<float*>(full.data()), DType::F32, full_box);
  for (int trial = 0; trial < count; ++trial) {
    const Box box = trial == 0 ? full_box : testing::random_box(n.shape, rng);
    CAPTURE(box.to_string());
    if (box.empty()) continue;
    std::vector<Box> needed(n.inputs.size());
    op_def(n.kind).needed(f.graph, n, box, needed);
    std::vector<std::vector<std::byte>> storage(n.inputs.size());
    std::vector<TensorView> views;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      views.push_back(partial_copy(f.views[k], needed[k], rng() % 2 == 0, storage[k]));
    std::vector<float> part(static_cast<size_t>(box.volume()));
    const TensorView part_view = dense_view(part.data(), DType::F32, box);
    const absl::Status st = kernel(KernelCall{f.graph, n, views, part_view, box});
    REQUIRE_MESSAGE(st.ok(), st.ToString());
    ref::for_each_index(box, [&](const int64_t* index) {
      const float x = *part_view.at<float>(index), y = *full_view.at<float>(index);
      if (std::memcmp(&x, &y, sizeof(float)) != 0)
        FAIL("partial-view value ", x, " differs from the full computation's ", y);
    });
  }
}

}  // namespace tessera::kernel_testing
