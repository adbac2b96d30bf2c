// Optimised slice and concat (any plain dtype: bit-exact copies in row runs, memcpy where both
// sides are contiguous) and f32 rope_multi (Flux's multi-axis rotary embedding).
//
// Exactness: copies move bits. rope_multi computes theta = pos * base^(-2i / d) in double as the
// reference, cos and sin in double rounded to float, then out_a = x_a c - x_b s and
// out_b = x_a s + x_b c with float multiplies and adds: the same bits for an element whatever
// box computes it (one implementation for all instruction sets).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/ops.h"
#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/copy_runs.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tessera::cpu {

namespace {

absl::Status slice_copy(const KernelArgs& args) {
  if (args.box.empty()) return absl::OkStatus();
  const SliceAttrs& a = args.node.attrs_as<SliceAttrs>();
  const int rank = args.node.rank(), last = rank - 1;
  const int64_t size = dtype_size(args.out.dtype);
  const TensorView& in = args.inputs[0];
  const BoxRows rows(args.box);
  const int64_t width = args.box.extent(last);
  int64_t out_index[kMaxRank], in_index[kMaxRank];
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, out_index);
    for (int d = 0; d < rank; ++d) in_index[d] = a.start[static_cast<size_t>(d)] + out_index[d] * a.step[static_cast<size_t>(d)];
    copy_run(element(args.out, out_index, size), args.out.strides[static_cast<size_t>(last)], element(in, in_index, size),
             in.strides[static_cast<size_t>(last)] * a.step[static_cast<size_t>(last)], width, size);
  }
  return absl::OkStatus();
}

// Input k covers [offset, offset + its extent) along the axis: the part of the box there is
// one box copy from it.
absl::Status concat_copy(const KernelArgs& args) {
  if (args.box.empty()) return absl::OkStatus();
  const int axis = static_cast<int>(args.node.attrs_as<ConcatAttrs>().axis);
  const int64_t size = dtype_size(args.out.dtype);
  int64_t offset = 0;
  for (const KernelInput& in : args.inputs) {
    const int64_t lo = offset, hi = offset + in.shape[static_cast<size_t>(axis)];
    offset = hi;
    Box part = args.box;
    part[axis] = Interval(std::max(args.box.begin(axis), lo), std::min(args.box.end(axis), hi));
    if (part.empty()) continue;
    Box from = part;
    from[axis] = Interval(part.begin(axis) - lo, part.end(axis) - lo);
    copy_box(args.out, part, in, from, size);
  }
  return absl::OkStatus();
}

int64_t load_position(const TensorView& positions, int64_t t, int64_t axis) {
  const int64_t at[2] = {t, axis};
  const int64_t o = positions.offset(at);
  if (positions.dtype == DType::I32) return static_cast<const int32_t*>(positions.data)[o];
  return static_cast<const int64_t*>(positions.data)[o];
}

absl::Status rope_multi_f32(const KernelArgs& args) {
  if (args.box.empty()) return absl::OkStatus();
  const RopeMultiAttrs& a = args.node.attrs_as<RopeMultiAttrs>();
  const int rank = args.node.rank(), last = rank - 1;
  int64_t rotated = 0;
  for (int64_t d : a.axes_dims) rotated += d;
  // Per rotated column pair: its axis and inverse frequency (computed once per call), and the
  // cos/sin of the current row's position (recomputed when t changes).
  ScratchCarver carver(args.scratch);
  const int64_t pairs = rotated / 2;
  double* inverse = carver.take<double>(pairs);
  int64_t* pair_axis = carver.take<int64_t>(pairs);
  float* cos_sin = carver.take<float>(2 * pairs);
  if (pairs > 0 && (inverse == nullptr || pair_axis == nullptr || cos_sin == nullptr))
    return absl::InternalError("[rope_multi] kernel scratch too small");
  int64_t p = 0;
  for (size_t axis = 0; axis < a.axes_dims.size(); ++axis)
    for (int64_t i = 0; i < a.axes_dims[axis] / 2; ++i, ++p) {
      inverse[p] = std::pow(a.base, -2.0 * static_cast<double>(i) / static_cast<double>(a.axes_dims[axis]));
      pair_axis[p] = static_cast<int64_t>(axis);
    }
  const TensorView& x = args.inputs[0];
  const TensorView& positions = args.inputs[1];
  const BoxRows rows(args.box);
  const int64_t j0 = args.box.begin(last), j1 = args.box.end(last);
  const int64_t in_step = x.strides[static_cast<size_t>(last)], out_step = args.out.strides[static_cast<size_t>(last)];
  int64_t index[kMaxRank];
  int64_t table_t = -1;
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, index);
    const int64_t t = index[rank - 3];
    if (t != table_t && j0 < rotated) {
      for (int64_t q = 0; q < pairs; ++q) {
        const double theta = static_cast<double>(load_position(positions, t, pair_axis[q])) * inverse[q];
        cos_sin[2 * q] = static_cast<float>(std::cos(theta));
        cos_sin[2 * q + 1] = static_cast<float>(std::sin(theta));
      }
      table_t = t;
    }
    index[last] = 0;
    const float* in = x.at<const float>(index);
    index[last] = j0;
    float* out = args.out.at<float>(index);
    for (int64_t j = j0; j < j1; ++j) {
      float value;
      if (j >= rotated) {
        value = in[j * in_step];
      } else {
        const int64_t q = j / 2;  // axis blocks have even sizes: pairs never straddle them
        const float c = cos_sin[2 * q], s = cos_sin[2 * q + 1];
        const bool first = j % 2 == 0;
        const float self = in[j * in_step], other = in[(first ? j + 1 : j - 1) * in_step];
        value = first ? self * c - other * s : other * s + self * c;
      }
      out[(j - j0) * out_step] = value;
    }
  }
  return absl::OkStatus();
}

}  // namespace

KernelFn slice_kernel(const Graph&, const Node& node, Isa) {
  return is_quantized(node.dtype) || node.rank() < 1 ? nullptr : slice_copy;
}

KernelFn concat_kernel(const Graph&, const Node& node, Isa) {
  return is_quantized(node.dtype) || node.rank() < 1 ? nullptr : concat_copy;
}

KernelFn rope_multi_kernel(const Graph& graph, const Node& node, Isa) {
  if (node.dtype != DType::F32 || graph.node(node.inputs[0]).dtype != DType::F32) return nullptr;
  return rope_multi_f32;
}

int64_t rope_multi_scratch_bytes(const Graph&, const Node& node, bool) {
  int64_t rotated = 0;
  for (int64_t d : node.attrs_as<RopeMultiAttrs>().axes_dims) rotated += d;
  const int64_t pairs = rotated / 2;
  return scratch_take_bytes<double>(pairs) + scratch_take_bytes<int64_t>(pairs) + scratch_take_bytes<float>(2 * pairs);
}

}  // namespace tessera::cpu
