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
//   IEEE float multiplies and adds: the same bits on every path (the AVX2 rotation of whole
//   contiguous rows does the same operations lane by lane).
//
// Scratch (the call's): rope's cos/sin table of n_rot / 2 pairs when n_rot > 512 (smaller ones
// use the thread's table, kept from call to call); rms_norm copies a row only when x is not
// contiguous along its last axis.
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

// out[j] = (x[j] * scale) * w[j] (w null: x[j] * scale) for contiguous rows, eight at a time:
// the scalar loop's two multiplies per element.
void scale_row_avx2(const float* x, const float* w, float scale, float* out, int64_t n) {
  const __m256 sv = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), sv);
    if (w != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + j));
    _mm256_storeu_ps(out + j, v);
  }
  for (; j < n; ++j) out[j] = w != nullptr ? (x[j] * scale) * w[j] : x[j] * scale;
}
TESSERA_AVX2_END
#endif

using ScaleRowFn = void (*)(const float* x, const float* w, float scale, float* out, int64_t n);

template <SquaresFn kSquares, ScaleRowFn kScaleRow = nullptr>
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
      if (kScaleRow != nullptr && out_step == 1 && w_step == 1) return kScaleRow(row + j0, weight, scale, out, columns);
      for (int64_t j = 0; j < columns; ++j)
        out[j * out_step] = (row[j0 + j] * scale) * weight[j * w_step];
    } else {
      if (kScaleRow != nullptr && out_step == 1) return kScaleRow(row + j0, nullptr, scale, out, columns);
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

// cos and sin of every pair at one position; recomputed when the position changes (rows of one
// t, all heads, share it). A pure function of (n_rot, base, scale, pos).
struct RopeTable {
  int64_t n_rot = 0, position = -1;
  double base = 0, freq_scale = 0;
  double* inverse = nullptr;  // base^(-2i / n_rot)
  float* cos = nullptr;       // of pair i
  float* sin = nullptr;
  bool filled = false;

  bool same_attrs(int64_t rot, double b, double scale) const {
    return inverse != nullptr && n_rot == rot && base == b && freq_scale == scale;
  }
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
      cos[i] = static_cast<float>(std::cos(theta));
      sin[i] = static_cast<float>(std::sin(theta));
    }
    filled = true;
    position = pos;
  }
};

// The thread's last table, for n_rot up to 2 * kCachedPairs: every rope node of a decode step
// (two per layer) rotates the same position with the same attributes, so a step computes the
// table once per thread instead of once per node. The values are those a fresh table gives.
constexpr int64_t kCachedPairs = 256;
struct RopeCache {
  alignas(64) double inverse[kCachedPairs];
  alignas(64) float cos[kCachedPairs];
  alignas(64) float sin[kCachedPairs];
  RopeTable table;
};
thread_local RopeCache t_rope_cache;

// One row's columns [j0, j0 + columns) from its input row (element steps in_step, out_step).
void rotate_row_scalar(const RopeTable& t, bool split, const float* in, int64_t in_step, float* out, int64_t out_step,
                       int64_t j0, int64_t columns) {
  const int64_t n_rot = t.n_rot, half = n_rot / 2;
  for (int64_t j = j0; j < j0 + columns; ++j) {
    float value;
    if (j >= n_rot) {
      value = in[j * in_step];
    } else {
      const bool first = split ? j < half : j % 2 == 0;
      const int64_t pair = split ? (first ? j : j - half) : j / 2;
      const int64_t partner = split ? (first ? j + half : j - half) : (first ? j + 1 : j - 1);
      const float c = t.cos[pair], s = t.sin[pair];
      const float self = in[j * in_step], other = in[partner * in_step];
      value = first ? self * c - other * s : other * s + self * c;
    }
    out[(j - j0) * out_step] = value;
  }
}

using RotateFn = bool (*)(const RopeTable& t, bool split, const float* in, float* out);

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN
// Columns [0, n_rot) of a contiguous row, eight at a time, with rotate_row_scalar's products
// and sums lane by lane (interleaved pairs: addsub gives the first element of a pair
// x_a c - x_b s and the second x_b c + x_a s, the same sum in the other order); false when
// n_rot does not split into whole vectors (the caller then runs the scalar loop).
bool rotate_row_avx2(const RopeTable& t, bool split, const float* in, float* out) {
  const int64_t n_rot = t.n_rot, half = n_rot / 2;
  if (split) {
    if (half % 8 != 0) return false;
    for (int64_t i = 0; i < half; i += 8) {
      const __m256 a = _mm256_loadu_ps(in + i), b = _mm256_loadu_ps(in + i + half);
      const __m256 c = _mm256_loadu_ps(t.cos + i), s = _mm256_loadu_ps(t.sin + i);
      _mm256_storeu_ps(out + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
      _mm256_storeu_ps(out + i + half, _mm256_add_ps(_mm256_mul_ps(a, s), _mm256_mul_ps(b, c)));
    }
    return true;
  }
  if (n_rot % 8 != 0) return false;
  const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  for (int64_t j = 0; j < n_rot; j += 8) {
    const __m256 x = _mm256_loadu_ps(in + j);
    const __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(t.cos + j / 2)), dup);
    const __m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(t.sin + j / 2)), dup);
    const __m256 swapped = _mm256_permute_ps(x, 0xB1);  // [x_b, x_a] per pair
    _mm256_storeu_ps(out + j, _mm256_addsub_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(swapped, s)));
  }
  return true;
}
TESSERA_AVX2_END
#endif

template <RotateFn kRotate = nullptr>
absl::Status rope_f32(const KernelArgs& args) {
  const int rank = args.node.rank(), last = rank - 1;
  const RopeAttrs& a = args.node.attrs_as<RopeAttrs>();
  const int64_t n_rot = a.n_rot, half = n_rot / 2;
  const bool split = a.mode == RopeMode::HalfSplit;
  const TensorView& x = args.inputs[0];
  const int64_t j0 = args.box.begin(last), columns = args.box.extent(last);
  const bool rotates = j0 < n_rot;  // pass-through columns never read the positions
  RopeTable local;
  RopeTable* table = &local;
  if (rotates && half <= kCachedPairs) {
    RopeCache& cache = t_rope_cache;
    if (!cache.table.same_attrs(n_rot, a.base, a.freq_scale)) {
      cache.table = RopeTable{};
      cache.table.n_rot = n_rot;
      cache.table.base = a.base;
      cache.table.freq_scale = a.freq_scale;
      cache.table.inverse = cache.inverse;
      cache.table.cos = cache.cos;
      cache.table.sin = cache.sin;
    }
    table = &cache.table;
  } else if (rotates) {
    ScratchCarver carver(args.scratch);
    local.n_rot = n_rot;
    local.base = a.base;
    local.freq_scale = a.freq_scale;
    local.inverse = carver.take<double>(half);
    local.cos = carver.take<float>(half);
    local.sin = carver.take<float>(half);
    if (local.inverse == nullptr || local.cos == nullptr || local.sin == nullptr)
      return absl::InternalError("[rope] kernel scratch too small");
  }
  const int64_t in_step = x.strides[last], out_step = args.out.strides[last];
  // Whole contiguous rows run the vector rotation, then copy their pass-through columns.
  const bool whole_rows = kRotate != nullptr && j0 == 0 && columns >= n_rot && in_step == 1 && out_step == 1;
  for_rows(args.box, [&](int64_t* index) {
    if (rotates) table->update(load_position(args.inputs[1], index[rank - 3]));
    index[last] = 0;
    const float* in = x.at<const float>(index);
    index[last] = j0;
    float* out = args.out.at<float>(index);
    if (whole_rows && kRotate(*table, split, in, out)) {
      if (columns > n_rot) std::copy(in + n_rot, in + columns, out + n_rot);
      return;
    }
    rotate_row_scalar(*table, split, in, in_step, out, out_step, j0, columns);
  });
  return absl::OkStatus();
}

}  // namespace

KernelFn rms_norm_kernel(const Graph& graph, const Node& node, Isa isa) {
  for (NodeId in : node.inputs)
    if (graph.node(in).dtype != DType::F32) return nullptr;
  if (node.rank() < 1) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa != Isa::Portable) return rms_norm_f32<sum_squares_avx2, scale_row_avx2>;
#endif
  (void)isa;
  return rms_norm_f32<sum_squares_portable>;
}

int64_t rms_norm_scratch_bytes(const Graph&, const Node& node, bool dense_views) {
  return dense_views || node.rank() < 1 ? 0 : scratch_take_bytes<float>(node.shape.back());
}

int64_t rope_scratch_bytes(const Graph&, const Node& node, bool) {
  const int64_t half = node.attrs_as<RopeAttrs>().n_rot / 2;
  if (half <= kCachedPairs) return 0;  // the thread's table
  return scratch_take_bytes<double>(half) + 2 * scratch_take_bytes<float>(half);
}

KernelFn rope_kernel(const Graph&, const Node& node, Isa isa) {
  if (node.dtype != DType::F32) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa != Isa::Portable) return rope_f32<rotate_row_avx2>;
#endif
  (void)isa;
  return rope_f32<>;
}

}  // namespace tessera::cpu
