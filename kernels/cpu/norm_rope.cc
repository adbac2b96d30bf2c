// Optimised f32 rms_norm and rope (semantics at their definition blocks, engine/ops_norm.cc and
// engine/ops_nn.cc).
//
// Exactness (DESIGN.md section 1):
// - rms_norm: a row's sum of squares always runs over the whole row from column 0 with eight
//   float lanes (FMA on AVX2, multiply then add when portable) and a fixed horizontal sum; the
//   scale 1 / sqrt(mean + eps) is computed in double from it; each output element is then
//   (x * scale) * weight, two IEEE multiplies whether done in a vector or a scalar tail.
// - rope: theta = (pos * freq_scale) * base^(-2i / n_rot) in double as the reference, cos and
//   sin in double rounded to float, then out_a = x_a c - x_b s, out_b = x_a s + x_b c with
//   IEEE float multiplies and adds: the same bits on every path (one implementation for all
//   instruction sets).
//
// Scratch (the call's): rope's cos/sin table of n_rot / 2 pairs (recomputed when the row's
// position changes); rms_norm copies a row only when x is not contiguous along its last axis.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/ops.h"
#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace tessera::cpu {

namespace {

// Calls row_fn(index) for every row of `box` (index: its first element), in order.
template <class RowFn>
void for_rows(const Box& box, RowFn&& row_fn) {
  if (box.empty()) return;
  const BoxRows rows(box);
  int64_t index[kMaxRank];
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, index);
    row_fn(index);
  }
}

// ---- rms_norm ---------------------------------------------------------------------------------

using SquaresFn = float (*)(const float*, int64_t);

float sum_squares_portable(const float* x, int64_t n) {
  float lanes[8] = {};
  for (int64_t i = 0; i < n; ++i) lanes[i % 8] = lanes[i % 8] + x[i] * x[i];
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
         ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN
float sum_squares_avx2(const float* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  if (i < n) {
    const __m256 v = _mm256_maskload_ps(x + i, avx2::tail_mask(n - i));
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  return avx2::hsum(acc);
}
TESSERA_AVX2_END
#endif

template <SquaresFn kSquares>
absl::Status rms_norm_f32(const KernelArgs& args) {
  const int last = args.node.rank() - 1;
  const int64_t width = args.node.shape[static_cast<size_t>(last)];
  const double eps = args.node.attrs_as<RmsNormAttrs>().eps;
  const TensorView& x = args.inputs[0];
  const bool has_weight = args.inputs.size() > 1;
  const int64_t j0 = args.box.begin(last), columns = args.box.extent(last);
  float* scratch = nullptr;
  if (x.strides[last] != 1) {
    scratch = ScratchCarver(args.scratch).take<float>(width);
    if (scratch == nullptr) return absl::InternalError("[rms_norm] kernel scratch too small for a strided x");
  }
  for_rows(args.box, [&](int64_t* index) {
    index[last] = 0;
    const float* row = x.at<const float>(index);
    const int64_t step = x.strides[last];
    if (step != 1) {
      for (int64_t k = 0; k < width; ++k) scratch[k] = row[k * step];
      row = scratch;
    }
    const double mean = static_cast<double>(kSquares(row, width)) / static_cast<double>(width);
    const float scale = static_cast<float>(1.0 / std::sqrt(mean + eps));
    index[last] = j0;
    float* out = args.out.at<float>(index);
    const int64_t out_step = args.out.strides[last];
    if (has_weight) {
      const TensorView& w = args.inputs[1];
      const float* weight = w.at<const float>(&j0);
      const int64_t w_step = w.strides[0];
      for (int64_t j = 0; j < columns; ++j)
        out[j * out_step] = (row[j0 + j] * scale) * weight[j * w_step];
    } else {
      for (int64_t j = 0; j < columns; ++j) out[j * out_step] = row[j0 + j] * scale;
    }
  });
  return absl::OkStatus();
}

// ---- rope -------------------------------------------------------------------------------------

int64_t load_position(const TensorView& positions, int64_t t) {
  const int64_t o = positions.offset(&t);
  if (positions.dtype == DType::I32) return static_cast<const int32_t*>(positions.data)[o];
  return static_cast<const int64_t*>(positions.data)[o];
}

// cos and sin of every pair at one position, in scratch memory; recomputed when the position
// changes (rows of one t, all heads, share it). A pure function of (n_rot, base, scale, pos).
struct RopeTable {
  int64_t n_rot = 0, position = -1;
  double base = 0, freq_scale = 0;
  double* inverse = nullptr;  // base^(-2i / n_rot)
  float* cos_sin = nullptr;   // cos, sin of pair i at 2i, 2i + 1
  bool filled = false;

  void update(int64_t pos) {
    const int64_t half = n_rot / 2;
    if (!filled) {
      for (int64_t i = 0; i < half; ++i)
        inverse[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    } else if (pos == position) {
      return;
    }
    for (int64_t i = 0; i < half; ++i) {
      const double theta = static_cast<double>(pos) * freq_scale * inverse[i];
      cos_sin[2 * i] = static_cast<float>(std::cos(theta));
      cos_sin[2 * i + 1] = static_cast<float>(std::sin(theta));
    }
    filled = true;
    position = pos;
  }
};

absl::Status rope_f32(const KernelArgs& args) {
  const int rank = args.node.rank(), last = rank - 1;
  const RopeAttrs& a = args.node.attrs_as<RopeAttrs>();
  const int64_t n_rot = a.n_rot, half = n_rot / 2;
  const bool split = a.mode == RopeMode::HalfSplit;
  const double base = a.base, freq_scale = a.freq_scale;
  const TensorView& x = args.inputs[0];
  const int64_t j0 = args.box.begin(last), columns = args.box.extent(last);
  const bool rotates = j0 < n_rot;  // pass-through columns never read the positions
  RopeTable table;
  if (rotates) {
    ScratchCarver carver(args.scratch);
    table.n_rot = n_rot;
    table.base = base;
    table.freq_scale = freq_scale;
    table.inverse = carver.take<double>(half);
    table.cos_sin = carver.take<float>(2 * half);
    if (table.inverse == nullptr || table.cos_sin == nullptr)
      return absl::InternalError("[rope] kernel scratch too small");
  }
  for_rows(args.box, [&](int64_t* index) {
    if (rotates) table.update(load_position(args.inputs[1], index[rank - 3]));
    const float* cos_sin = table.cos_sin;
    index[last] = 0;
    const float* in = x.at<const float>(index);
    const int64_t in_step = x.strides[last];
    index[last] = j0;
    float* out = args.out.at<float>(index);
    const int64_t out_step = args.out.strides[last];
    for (int64_t j = j0; j < j0 + columns; ++j) {
      float value;
      if (j >= n_rot) {
        value = in[j * in_step];
      } else {
        const bool first = split ? j < half : j % 2 == 0;
        const int64_t pair = split ? (first ? j : j - half) : j / 2;
        const int64_t partner = split ? (first ? j + half : j - half) : (first ? j + 1 : j - 1);
        const float c = cos_sin[2 * pair], s = cos_sin[2 * pair + 1];
        const float self = in[j * in_step], other = in[partner * in_step];
        value = first ? self * c - other * s : other * s + self * c;
      }
      out[(j - j0) * out_step] = value;
    }
  });
  return absl::OkStatus();
}

}  // namespace

KernelFn rms_norm_kernel(const Graph& graph, const Node& node, Isa isa) {
  for (NodeId in : node.inputs)
    if (graph.node(in).dtype != DType::F32) return nullptr;
  if (node.rank() < 1) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa != Isa::Portable) return rms_norm_f32<sum_squares_avx2>;
#endif
  (void)isa;
  return rms_norm_f32<sum_squares_portable>;
}

int64_t rms_norm_scratch_bytes(const Graph&, const Node& node, bool dense_views) {
  return dense_views || node.rank() < 1 ? 0 : scratch_take_bytes<float>(node.shape.back());
}

int64_t rope_scratch_bytes(const Graph&, const Node& node, bool) {
  const int64_t half = node.attrs_as<RopeAttrs>().n_rot / 2;
  return scratch_take_bytes<double>(half) + scratch_take_bytes<float>(2 * half);
}

KernelFn rope_kernel(const Graph&, const Node& node, Isa) {
  return node.dtype == DType::F32 ? rope_f32 : nullptr;
}

}  // namespace tessera::cpu
