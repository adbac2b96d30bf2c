// TensorView: strided access to a buffer holding a box (`extent`) of a tensor. Kernels address
// elements by global tensor coordinates; the view maps them into the buffer.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "engine/graph.h"
#include "regions/box.h"

namespace tessera {

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Box extent;                          // the elements the buffer holds
  std::array<int64_t, kMaxRank> strides{};  // elements, for the extent

  int64_t offset(const int64_t* index) const {
    int64_t o = 0;
    for (int i = 0; i < extent.rank(); ++i) o += (index[i] - extent.begin(i)) * strides[i];
    return o;
  }
  template <class T>
  T* at(const int64_t* index) const {
    return static_cast<T*>(data) + offset(index);
  }
};

// A dense row-major view of `extent` over `data`.
TensorView dense_view(void* data, DType dtype, const Box& extent);

// What a kernel gets: the node, one view per input, the output view and the output box to
// compute (inside out.extent). Kernels never allocate on success, never throw, and compute each
// element in an order independent of `box`.
struct KernelArgs {
  const Graph& graph;
  const Node& node;
  std::span<const TensorView> inputs;
  const TensorView& out;
  const Box& box;
};

using KernelFn = absl::Status (*)(const KernelArgs& args);

}  // namespace tessera
