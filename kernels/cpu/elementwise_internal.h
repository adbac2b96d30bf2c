// Internal to kernels/cpu: the f32 element maps of elementwise.cc and its row drivers, shared
// with the fused elementwise kernel (fused.cc). Both call the same compiled maps, so a fused
// chain computes every element bitwise as the unfused unary / binary kernels do.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

#include "engine/ops.h"
#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/view.h"

namespace tessera::cpu::elementwise {

constexpr int64_t kChunk = 256;             // elements staged at a time for strided rows

// Functions with an optimised form (the others run the reference kernel).
bool unary_covered(UnaryFn fn);
bool binary_covered(BinaryFn fn);

// Contiguous arrays of n elements: y = f(x) / y = f(a, b). Each element's value depends only
// on its operands (never on n or its position). fn must be covered.
using UnaryMap = void (*)(UnaryFn, const float*, float*, int64_t);
using BinaryMap = void (*)(BinaryFn, const float*, const float*, float*, int64_t);
void unary_map_portable(UnaryFn fn, const float* x, float* y, int64_t n);
void binary_map_portable(BinaryFn fn, const float* a, const float* b, float* y, int64_t n);
#if TESSERA_HAVE_AVX2_PATHS
// Require isa_supported(Isa::Avx2).
void unary_map_avx2(UnaryFn fn, const float* x, float* y, int64_t n);
void binary_map_avx2(BinaryFn fn, const float* a, const float* b, float* y, int64_t n);
#endif

// ---- row drivers --------------------------------------------------------------------------------

// One operand of an output row: element j of the row at data[j * step] (step 0: broadcast).
struct RowOperand {
  const float* data = nullptr;
  int64_t step = 1;
};

// Contiguous elements [j, j + n) of an operand: the row itself or a staged copy in `buffer`.
inline const float* stage(const RowOperand& op, int64_t j, int64_t n, float* buffer) {
  if (op.step == 1) return op.data + j;
  for (int64_t i = 0; i < n; ++i) buffer[i] = op.data[(j + i) * op.step];
  return buffer;
}

// Input index of an output index under numpy broadcasting (kernels/ref/elementwise_fns.h).
inline void broadcast_index(const Shape& in_shape, int out_rank, const int64_t* out_index,
                            int64_t* in_index) {
  const int offset = out_rank - static_cast<int>(in_shape.size());
  for (int d = 0; d < static_cast<int>(in_shape.size()); ++d)
    in_index[d] = in_shape[static_cast<size_t>(d)] == 1 ? 0 : out_index[d + offset];
}

// The row of op input `input` (broadcast to the node's shape) read by the output row at
// out_index (rank >= 1).
inline RowOperand operand_row(const KernelArgs& args, int input, const int64_t* out_index) {
  const Shape& shape = args.inputs[static_cast<size_t>(input)].shape;
  const TensorView& view = args.inputs[static_cast<size_t>(input)];
  int64_t index[kMaxRank];
  broadcast_index(shape, args.node.rank(), out_index, index);
  RowOperand op;
  op.data = view.at<const float>(index);
  const bool broadcast = shape.empty() || (shape.back() == 1 && args.node.shape.back() != 1);
  op.step = broadcast ? 0 : view.strides[shape.size() - 1];
  return op;
}

// Calls row_fn(index) for every row of `box` (index: its first element), in order (the
// backend's team splits boxes among its workers; kernels run on one thread).
template <class RowFn>
void for_rows(const Box& box, RowFn&& row_fn) {
  if (box.empty()) return;
  const BoxRows rows(box);
  int64_t index[kMaxRank];
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, index);
    row_fn(static_cast<const int64_t*>(index));
  }
}

// Calls row_fn(index, width) for every row of the box (index: its first element; width: the
// box's last extent), or once with width = the box's volume when the output and every input
// (none broadcast) hold the box as one contiguous run. Rows only chunk the work: every element
// gets the same operations either way, and 20-element rows (a 16x20 feature map) cost more in
// row overhead than in arithmetic.
template <class RowFn>
void for_runs(const KernelArgs& args, RowFn&& row_fn) {
  const Box& box = args.box;
  if (box.empty()) return;
  bool whole = one_run(args.out, box);
  for (size_t k = 0; whole && k < args.inputs.size(); ++k)
    whole = args.inputs[k].shape == args.node.shape && one_run(args.inputs[k], box);
  if (whole) {
    int64_t index[kMaxRank];
    for (int d = 0; d < box.rank(); ++d) index[d] = box.begin(d);
    row_fn(static_cast<const int64_t*>(index), box.volume());
    return;
  }
  const int64_t width = box.extent(box.rank() - 1);
  for_rows(box, [&](const int64_t* index) { row_fn(index, width); });
}

}  // namespace tessera::cpu::elementwise
