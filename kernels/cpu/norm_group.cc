// Optimised f32 layer_norm and group_norm (semantics at their definition blocks in
// engine/ops_norm.cc).
//
// Exactness (DESIGN.md section 1): the statistics of a row (layer_norm) or of a whole group of
// one sample (group_norm: its channels x all spatial positions) are computed over all of it on
// every call, whatever the box and the views' layout, in one fixed order: the elements, in
// row-major order over the row or group, go into eight double lanes by position (element k into
// lane k mod 8), and the lanes are summed in a fixed tree; mean first, then the sum of squared
// deviations from it (two passes, like the reference). Each output element is then
// ((x - mean) * inv_std) * weight + bias in double, rounded once to float. The box only decides
// which elements are written. The contiguous runs take vector loops per instruction set (eight
// doubles: one AVX-512 vector, two AVX2 ones), doing the scalar code's operations in its order
// (no contraction): every instruction set gives the same bits.
#include <cmath>
#include <cstring>

#include "engine/ops.h"
#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace tessera::cpu {

namespace {

constexpr int kLanes = 8;

// The loops over contiguous floats. terms: lanes[l] += x[i + l] - centre (its square when
// `squares`) for each i a multiple of 8 below count (a multiple of 8). normalise: out[i] =
// float(((x[i] - mean) * inv_std) * w + b) in double, the product with w and the sum with b
// only where w, b are given.
struct Loops {
  void (*terms)(const float* x, int64_t count, double centre, bool squares, double* lanes);
  void (*normalise)(const float* x, float* out, int64_t count, double mean, double inv_std, const double* w,
                    const double* b);
};

void portable_terms(const float* x, int64_t count, double centre, bool squares, double* lanes) {
  for (int64_t i = 0; i < count; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double d = static_cast<double>(x[i + l]) - centre;
      lanes[l] += squares ? d * d : d;
    }
}

void portable_normalise(const float* x, float* out, int64_t count, double mean, double inv_std, const double* w,
                        const double* b) {
  for (int64_t i = 0; i < count; ++i) {
    double y = (static_cast<double>(x[i]) - mean) * inv_std;
    if (w != nullptr) y *= *w;
    if (b != nullptr) y += *b;
    out[i] = static_cast<float>(y);
  }
}

constexpr Loops kPortable{portable_terms, portable_normalise};

#if TESSERA_HAVE_AVX2_PATHS
// The loops (norm_group_simd.inc) over each set's vector of doubles, with GCC / clang vector
// arithmetic; loads and stores convert floats with the set's instructions.
TESSERA_AVX2_BEGIN
namespace norm_avx2 {
using Vd = __m256d;  // four doubles
constexpr int kWidth = 4;
inline Vd widen(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
inline void narrow(float* p, Vd v) { _mm_storeu_ps(p, _mm256_cvtpd_ps(v)); }
#include "kernels/cpu/norm_group_simd.inc"
}  // namespace norm_avx2
TESSERA_AVX2_END

TESSERA_AVX512_BEGIN
namespace norm_avx512 {
using Vd = __m512d;  // eight doubles
constexpr int kWidth = 8;
inline Vd widen(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
inline void narrow(float* p, Vd v) { _mm256_storeu_ps(p, _mm512_cvtpd_ps(v)); }
#include "kernels/cpu/norm_group_simd.inc"
}  // namespace norm_avx512
TESSERA_AVX512_END

constexpr Loops kAvx2{norm_avx2::terms, norm_avx2::normalise};
constexpr Loops kAvx512{norm_avx512::terms, norm_avx512::normalise};
#endif

const Loops& loops_for(Isa isa) {
#if TESSERA_HAVE_AVX2_PATHS
  if (isa >= Isa::Avx512) return kAvx512;
  if (isa == Isa::Avx2) return kAvx2;
#endif
  (void)isa;
  return kPortable;
}

double fold(const double* lanes) {
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
         ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

// Adds x[i * step] (centre == 0) or (x[i * step] - centre)^2, i < count, to the lanes, element
// i into lane (first + i) mod 8: a row continues the lanes where the previous row stopped.
template <bool kSquares>
void add_run(const Loops& loops, const float* x, int64_t count, int64_t step, double centre, int64_t first,
             double* lanes) {
  auto term = [&](float v) {
    const double d = static_cast<double>(v) - centre;
    return kSquares ? d * d : d;
  };
  int64_t i = 0;
  for (; i < count && (first + i) % kLanes != 0; ++i) lanes[(first + i) % kLanes] += term(x[i * step]);
  const int64_t full = i + (count - i) / kLanes * kLanes;
  if (step == 1) {
    loops.terms(x + i, full - i, centre, kSquares, lanes);
    i = full;
  } else {
    for (; i < full; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += term(x[(i + l) * step]);
  }
  for (; i < count; ++i) lanes[(first + i) % kLanes] += term(x[i * step]);
}

struct Moments {
  double mean = 0, inv_std = 0;
};

// Mean and 1 / sqrt(variance + eps) of the elements of `rows` (a box of x whose last axis is
// whole), row after row in row-major order.
Moments moments(const Loops& loops, const TensorView& x, const Box& rows, double eps) {
  const int last = rows.rank() - 1;
  const int64_t width = rows.extent(last), step = x.strides[static_cast<size_t>(last)];
  const BoxRows box_rows(rows);
  int64_t index[kMaxRank];
  const bool whole = one_run(x, rows);  // one call for a small map's group (its rows are short)
  auto total = [&](auto squares, double centre) {
    double lanes[kLanes] = {};
    if (whole) {
      for (int d = 0; d < rows.rank(); ++d) index[d] = rows.begin(d);
      add_run<decltype(squares)::value>(loops, x.at<const float>(index), rows.volume(), 1, centre, 0, lanes);
      return fold(lanes);
    }
    for (int64_t r = 0; r < box_rows.count(); ++r) {
      box_rows.index(r, index);
      add_run<decltype(squares)::value>(loops, x.at<const float>(index), width, step, centre, r * width, lanes);
    }
    return fold(lanes);
  };
  const double count = static_cast<double>(rows.volume());
  Moments m;
  m.mean = total(std::false_type{}, 0.0) / count;
  const double variance = total(std::true_type{}, m.mean) / count;
  m.inv_std = 1.0 / std::sqrt(variance + eps);
  return m;
}

// The optional per-channel (layer_norm: per-column) parameters.
struct Affine {
  const TensorView* weight = nullptr;
  const TensorView* bias = nullptr;
};

Affine affine_of(const KernelArgs& args, bool has_weight, bool has_bias) {
  Affine a;
  if (has_weight) a.weight = &args.inputs[1];
  if (has_bias) a.bias = &args.inputs[has_weight ? 2 : 1];
  return a;
}

float param(const TensorView* view, int64_t at, float fallback) {
  return view == nullptr ? fallback : *view->at<const float>(&at);
}

// Writes columns [j0, j0 + count) of one row: out = ((x - mean) * inv_std) * w + b in double.
// `column_params`: weight and bias vary along the row (layer_norm) or are the row's (group_norm).
void normalise_row(const Loops& loops, const float* x, int64_t x_step, float* out, int64_t out_step, int64_t count,
                   const Moments& m, const Affine& affine, int64_t param_index, bool column_params) {
  const bool has_weight = affine.weight != nullptr, has_bias = affine.bias != nullptr;
  if (!column_params) {
    const double w = param(affine.weight, param_index, 1.0f),
                 b = param(affine.bias, param_index, 0.0f);
    if (x_step == 1 && out_step == 1) {
      loops.normalise(x, out, count, m.mean, m.inv_std, has_weight ? &w : nullptr, has_bias ? &b : nullptr);
      return;
    }
    for (int64_t i = 0; i < count; ++i) {
      double y = (static_cast<double>(x[i * x_step]) - m.mean) * m.inv_std;
      if (has_weight) y *= w;
      if (has_bias) y += b;
      out[i * out_step] = static_cast<float>(y);
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    double y = (static_cast<double>(x[i * x_step]) - m.mean) * m.inv_std;
    if (has_weight) y *= static_cast<double>(param(affine.weight, param_index + i, 1.0f));
    if (has_bias) y += static_cast<double>(param(affine.bias, param_index + i, 0.0f));
    out[i * out_step] = static_cast<float>(y);
  }
}

template <Isa kIsa>
absl::Status layer_norm_f32(const KernelArgs& args) {
  const Loops& loops = loops_for(kIsa);
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const LayerNormAttrs& a = args.node.attrs_as<LayerNormAttrs>();
  const Affine affine = affine_of(args, a.has_weight, a.has_bias);
  const TensorView& x = args.inputs[0];
  const int last = box.rank() - 1;
  const int64_t width = args.node.shape[static_cast<size_t>(last)];
  const int64_t j0 = box.begin(last), columns = box.extent(last);
  const BoxRows rows(box);
  int64_t index[kMaxRank];
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, index);
    Box row = Box::of_rank(box.rank());
    for (int d = 0; d < last; ++d) row[d] = Interval(index[d], index[d] + 1);
    row[last] = Interval(0, width);
    const Moments m = moments(loops, x, row, a.eps);
    normalise_row(loops, x.at<const float>(index), x.strides[static_cast<size_t>(last)],
                  args.out.at<float>(index), args.out.strides[static_cast<size_t>(last)], columns,
                  m, affine, j0, true);
  }
  return absl::OkStatus();
}

template <Isa kIsa>
absl::Status group_norm_f32(const KernelArgs& args) {
  const Loops& loops = loops_for(kIsa);
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const GroupNormAttrs& a = args.node.attrs_as<GroupNormAttrs>();
  const Affine affine = affine_of(args, a.has_weight, a.has_bias);
  const TensorView& x = args.inputs[0];
  const Shape& shape = args.node.shape;
  const int rank = box.rank(), last = rank - 1;
  const int64_t group_size = shape[1] / a.groups;
  for (int64_t n = box.begin(0); n < box.end(0); ++n) {
    for (int64_t g = box.begin(1) / group_size; g * group_size < box.end(1); ++g) {
      Box group = Box::full(shape);
      group[0] = Interval(n, n + 1);
      group[1] = Interval(g * group_size, (g + 1) * group_size);
      const Moments m = moments(loops, x, group, a.eps);
      const Box part = box.intersect(group);
      if (part.empty()) continue;
      int64_t index[kMaxRank];
      // Row by row; a row's channel is index[1] (rank 2: rows run along channels).
      auto by_rows = [&](const Box& rows_box) {
        const BoxRows rows(rows_box);
        for (int64_t r = 0; r < rows.count(); ++r) {
          rows.index(r, index);
          normalise_row(loops, x.at<const float>(index), x.strides[static_cast<size_t>(last)],
                        args.out.at<float>(index), args.out.strides[static_cast<size_t>(last)],
                        rows_box.extent(last), m, affine, index[1], /*column_params=*/rank == 2);
        }
      };
      if (rank == 2) {
        by_rows(part);
        continue;
      }
      // Channel by channel; a channel's part in one call when both views hold it contiguously
      // (a small feature map's rows are short: per-row calls cost more than the arithmetic).
      for (int64_t c = part.begin(1); c < part.end(1); ++c) {
        Box plane = part;
        plane[1] = Interval(c, c + 1);
        if (!one_run(x, plane) || !one_run(args.out, plane)) {
          by_rows(plane);
          continue;
        }
        for (int d = 0; d < rank; ++d) index[d] = plane.begin(d);
        normalise_row(loops, x.at<const float>(index), 1, args.out.at<float>(index), 1, plane.volume(), m, affine, c, false);
      }
    }
  }
  return absl::OkStatus();
}

bool all_f32(const Graph& graph, const Node& node) {
  if (node.dtype != DType::F32) return false;
  for (NodeId in : node.inputs)
    if (graph.node(in).dtype != DType::F32) return false;
  return true;
}

}  // namespace

KernelFn layer_norm_kernel(const Graph& graph, const Node& node, Isa isa) {
  if (!all_f32(graph, node) || node.rank() < 1) return nullptr;
  if (isa >= Isa::Avx512) return layer_norm_f32<Isa::Avx512>;
  return isa == Isa::Avx2 ? layer_norm_f32<Isa::Avx2> : layer_norm_f32<Isa::Portable>;
}

KernelFn group_norm_kernel(const Graph& graph, const Node& node, Isa isa) {
  if (!all_f32(graph, node) || node.rank() < 2) return nullptr;
  if (isa >= Isa::Avx512) return group_norm_f32<Isa::Avx512>;
  return isa == Isa::Avx2 ? group_norm_f32<Isa::Avx2> : group_norm_f32<Isa::Portable>;
}

}  // namespace tessera::cpu
