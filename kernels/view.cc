#include "kernels/view.h"

#include <cstring>

#include "kernels/ref/access.h"

namespace tessera {

namespace {

// Calls copy(view_bytes, dense_bytes, bytes) for each run of `box`, in row-major order. A
// quantised view's runs are whole blocks (its boxes are, along a last axis of stride 1). Where
// the box covers the view's whole trailing axes and the view holds them one after another, their
// rows are one run (a session read of a whole conv output is one copy, not one per image row).
template <class Copy>
void for_each_box_run(const TensorView& view, const Box& box, std::byte* dense, Copy copy) {
  if (box.empty()) return;
  const int64_t size = dtype_size(view.dtype);
  const int rank = box.rank();
  std::byte* base = static_cast<std::byte*>(view.data);
  if (rank == 0) return copy(base, dense, size);
  const int64_t step = view.strides[rank - 1];
  // Axes [inner, rank) form each run of `run` elements.
  int inner = rank - 1;
  int64_t run = box.extent(rank - 1);
  while (step == 1 && inner > 0 && box[inner] == view.extent[inner] &&
         view.strides[inner - 1] == view.strides[inner] * view.extent.extent(inner)) {
    --inner;
    run *= box.extent(inner);
  }
  Box rows = box;
  for (int d = inner; d < rank; ++d) rows[d] = Interval(box.begin(d), box.begin(d) + 1);
  const int64_t run_bytes = dtype_bytes(view.dtype, run);
  ref::for_each_index(rows, [&](const int64_t* index) {
    std::byte* p = base + dtype_bytes(view.dtype, view.offset(index));
    if (step == 1) {
      copy(p, dense, run_bytes);
      dense += run_bytes;
      return;
    }
    for (int64_t j = 0; j < run; ++j, dense += size) copy(p + j * step * size, dense, size);
  });
}

// Whether the run of row-major linear indices [first, first + count) of a tensor of `shape`
// lies in `view` one element after another: every dimension whose index changes along the run
// has the dense stride.
bool run_is_dense(const TensorView& view, const Shape& shape, int64_t first, int64_t count) {
  int64_t block = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    if (first / block != (first + count - 1) / block && view.strides[d] != block) return false;
    block *= shape[static_cast<size_t>(d)];
  }
  return true;
}

}  // namespace

bool reshape_in_place(const TensorView& in, const Shape& in_shape, const TensorView& out, const Shape& out_shape,
                      const Box& box) {
  if (is_quantized(out.dtype) || box.empty() || in.data == nullptr || out.data == nullptr || !is_linear_run(box, out_shape))
    return false;
  const int64_t first = linear_begin(box, out_shape);
  int64_t out_index[kMaxRank], in_index[kMaxRank];
  for (int e = 0; e < box.rank(); ++e) out_index[e] = box.begin(e);
  int64_t rest = first;
  for (int e = static_cast<int>(in_shape.size()) - 1; e >= 0; --e) {
    in_index[e] = rest % in_shape[static_cast<size_t>(e)];
    rest /= in_shape[static_cast<size_t>(e)];
  }
  const int64_t size = dtype_size(out.dtype), count = box.volume();
  return static_cast<const std::byte*>(out.data) + out.offset(out_index) * size ==
             static_cast<const std::byte*>(in.data) + in.offset(in_index) * size &&
         run_is_dense(out, out_shape, first, count) && run_is_dense(in, in_shape, first, count);
}

void copy_box_to_view(const TensorView& view, const Box& box, const void* dense) {
  for_each_box_run(view, box, static_cast<std::byte*>(const_cast<void*>(dense)),
                   [](std::byte* v, const std::byte* d, int64_t n) { std::memcpy(v, d, static_cast<size_t>(n)); });
}

void copy_box_from_view(const TensorView& view, const Box& box, void* dense) {
  for_each_box_run(view, box, static_cast<std::byte*>(dense),
                   [](const std::byte* v, std::byte* d, int64_t n) { std::memcpy(d, v, static_cast<size_t>(n)); });
}

TensorView dense_view(void* data, DType dtype, const Box& extent) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.extent = extent;
  int64_t s = 1;
  for (int i = extent.rank() - 1; i >= 0; --i) {
    v.strides[i] = s;
    s *= extent.extent(i);
  }
  return v;
}

KernelNode kernel_node(const Graph& graph, const Node& node) {
  KernelNode result(node);
  if (node.kind == OpKind::Constant && node.constant >= 0)
    result.constant_data = graph.constant_data(node.constant).data;
  return result;
}

void kernel_inputs(const Graph& graph, const Node& node, std::span<const TensorView> views,
                   std::vector<KernelInput>& out) {
  out.clear();
  for (size_t i = 0; i < node.inputs.size() && i < views.size(); ++i) {
    KernelInput input;
    static_cast<TensorView&>(input) = views[i];
    input.shape = graph.node(node.inputs[i]).shape;
    out.push_back(std::move(input));
  }
}

}  // namespace tessera
