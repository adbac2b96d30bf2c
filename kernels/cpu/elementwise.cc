// Optimised f32 unary and binary ops (semantics in kernels/ref/elementwise.cc). The element maps
// are shared with the fused elementwise kernel (fused.cc) through elementwise_internal.h.
//
// Exactness (DESIGN.md section 1): every element goes through the same function whatever its
// position: rows are processed in vectors of 8 and a partial last vector is padded into a full
// one (never a scalar twin that could round differently). Binary broadcasting maps each output
// row to one row (or one broadcast value) of each input, numpy-style.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "engine/ops.h"
#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_internal.h"
#include "kernels/cpu/quant_avx512.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/quant.h"

namespace tessera::cpu {

// Internal to kernels/cpu (elementwise_internal.h declares what fused.cc shares).
namespace elementwise {

// ---- element functions: a scalar form (portable) and an 8-lane form (AVX2) -------------------

float sigmoid_scalar(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

float unary_scalar(UnaryFn fn, float x) {
  switch (fn) {
    case UnaryFn::Neg:
      return -x;
    case UnaryFn::Exp:
      return std::exp(x);
    case UnaryFn::Sqrt:
      return std::sqrt(x);
    case UnaryFn::Rsqrt:
      return 1.0f / std::sqrt(x);
    case UnaryFn::Abs:
      return std::fabs(x);
    case UnaryFn::Reciprocal:
      return 1.0f / x;
    case UnaryFn::Relu:
      return x > 0 ? x : 0.0f;
    case UnaryFn::Sigmoid:
      return sigmoid_scalar(x);
    case UnaryFn::Tanh:
      return std::tanh(x);
    case UnaryFn::GeluTanh:
      return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case UnaryFn::GeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case UnaryFn::Silu:
      return x / (1.0f + std::exp(-x));
    case UnaryFn::Floor:
      return std::floor(x);
    case UnaryFn::Ceil:
      return std::ceil(x);
    case UnaryFn::Round:
      return std::nearbyint(x);
    case UnaryFn::Erf:
      return std::erf(x);
    default:
      return x;
  }
}

bool unary_covered(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::Neg:
    case UnaryFn::Exp:
    case UnaryFn::Sqrt:
    case UnaryFn::Rsqrt:
    case UnaryFn::Abs:
    case UnaryFn::Reciprocal:
    case UnaryFn::Relu:
    case UnaryFn::Sigmoid:
    case UnaryFn::Tanh:
    case UnaryFn::GeluTanh:
    case UnaryFn::GeluErf:
    case UnaryFn::Silu:
    case UnaryFn::Floor:
    case UnaryFn::Ceil:
    case UnaryFn::Round:
    case UnaryFn::Erf:
      return true;
    default:
      return false;
  }
}

float binary_scalar(BinaryFn fn, float a, float b) {
  switch (fn) {
    case BinaryFn::Add:
      return a + b;
    case BinaryFn::Sub:
      return a - b;
    case BinaryFn::Mul:
      return a * b;
    case BinaryFn::Div:
      return a / b;
    case BinaryFn::Minimum:
      return std::isnan(a) || std::isnan(b) ? a + b : std::min(a, b);
    case BinaryFn::Maximum:
      return std::isnan(a) || std::isnan(b) ? a + b : std::max(a, b);
    default:
      return 0;
  }
}

bool binary_covered(BinaryFn fn) {
  switch (fn) {
    case BinaryFn::Add:
    case BinaryFn::Sub:
    case BinaryFn::Mul:
    case BinaryFn::Div:
    case BinaryFn::Minimum:
    case BinaryFn::Maximum:
      return true;
    default:
      return false;
  }
}

void unary_map_portable(UnaryFn fn, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = unary_scalar(fn, x[i]);
}
void binary_map_portable(BinaryFn fn, const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = binary_scalar(fn, a[i], b[i]);
}

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN

__attribute__((always_inline)) inline __m256 unary_vector(UnaryFn fn, __m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  switch (fn) {
    case UnaryFn::Neg:
      return _mm256_xor_ps(x, sign);
    case UnaryFn::Exp:
      return avx2::exp(x);
    case UnaryFn::Sqrt:
      return _mm256_sqrt_ps(x);
    case UnaryFn::Rsqrt:
      return _mm256_div_ps(one, _mm256_sqrt_ps(x));
    case UnaryFn::Abs:
      return _mm256_andnot_ps(sign, x);
    case UnaryFn::Reciprocal:
      return _mm256_div_ps(one, x);
    case UnaryFn::Relu:
      return _mm256_max_ps(x, _mm256_setzero_ps());  // NaN -> 0, as reference
    case UnaryFn::Sigmoid:
      return _mm256_div_ps(one, _mm256_add_ps(one, avx2::exp(_mm256_xor_ps(x, sign))));
    case UnaryFn::Tanh:
      return avx2::tanh(x);
    case UnaryFn::GeluTanh: {
      const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
      const __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                         _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), cube, x));
      return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, avx2::tanh(inner)));
    }
    case UnaryFn::GeluErf: {
      const __m256 e = avx2::erf(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
      return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, e));
    }
    case UnaryFn::Silu:
      return _mm256_div_ps(x, _mm256_add_ps(one, avx2::exp(_mm256_xor_ps(x, sign))));
    case UnaryFn::Floor:
      return _mm256_floor_ps(x);
    case UnaryFn::Ceil:
      return _mm256_ceil_ps(x);
    case UnaryFn::Round:
      return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    case UnaryFn::Erf:
      return avx2::erf_relative(x);
    default:
      return x;
  }
}

__attribute__((always_inline)) inline __m256 binary_vector(BinaryFn fn, __m256 a, __m256 b) {
  switch (fn) {
    case BinaryFn::Add:
      return _mm256_add_ps(a, b);
    case BinaryFn::Sub:
      return _mm256_sub_ps(a, b);
    case BinaryFn::Mul:
      return _mm256_mul_ps(a, b);
    case BinaryFn::Div:
      return _mm256_div_ps(a, b);
    case BinaryFn::Minimum:
      return _mm256_blendv_ps(_mm256_min_ps(a, b), _mm256_add_ps(a, b),
                              _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    case BinaryFn::Maximum:
      return _mm256_blendv_ps(_mm256_max_ps(a, b), _mm256_add_ps(a, b),
                              _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    default:
      return a;
  }
}

// The switch sits outside the loops: one instantiation per function.
template <UnaryFn kFn>
void unary_map_avx2_fn(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, unary_vector(kFn, _mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i mask = avx2::tail_mask(n - i);
    _mm256_maskstore_ps(y + i, mask, unary_vector(kFn, _mm256_maskload_ps(x + i, mask)));
  }
}

template <BinaryFn kFn>
void binary_map_avx2_fn(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, binary_vector(kFn, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    const __m256i mask = avx2::tail_mask(n - i);
    _mm256_maskstore_ps(
        y + i, mask,
        binary_vector(kFn, _mm256_maskload_ps(a + i, mask), _mm256_maskload_ps(b + i, mask)));
  }
}

TESSERA_AVX2_END

template <size_t... kIndex>
void unary_map_avx2_dispatch(UnaryFn fn, const float* x, float* y, int64_t n,
                             std::index_sequence<kIndex...>) {
  using Fn = void (*)(const float*, float*, int64_t);
  static constexpr Fn table[] = {unary_map_avx2_fn<static_cast<UnaryFn>(kIndex)>...};
  table[static_cast<size_t>(fn)](x, y, n);
}
void unary_map_avx2(UnaryFn fn, const float* x, float* y, int64_t n) {
  unary_map_avx2_dispatch(fn, x, y, n,
                          std::make_index_sequence<static_cast<size_t>(UnaryFn::Count)>());
}

template <size_t... kIndex>
void binary_map_avx2_dispatch(BinaryFn fn, const float* a, const float* b, float* y, int64_t n,
                              std::index_sequence<kIndex...>) {
  using Fn = void (*)(const float*, const float*, float*, int64_t);
  static constexpr Fn table[] = {binary_map_avx2_fn<static_cast<BinaryFn>(kIndex)>...};
  table[static_cast<size_t>(fn)](a, b, y, n);
}
void binary_map_avx2(BinaryFn fn, const float* a, const float* b, float* y, int64_t n) {
  binary_map_avx2_dispatch(fn, a, b, y, n,
                           std::make_index_sequence<static_cast<size_t>(BinaryFn::Count)>());
}
#endif  // TESSERA_HAVE_AVX2_PATHS

template <UnaryMap kMap>
absl::Status unary_f32(const KernelArgs& args) {
  const UnaryFn fn = args.node.attrs_as<UnaryAttrs>().fn;
  if (args.node.rank() == 0) {
    kMap(fn, args.inputs[0].at<const float>(nullptr), args.out.at<float>(nullptr), 1);
    return absl::OkStatus();
  }
  const int last = args.node.rank() - 1;
  for_runs(args, [&](const int64_t* index, int64_t width) {
    const RowOperand x{args.inputs[0].at<const float>(index), args.inputs[0].strides[last]};
    float* y = args.out.at<float>(index);
    const int64_t y_step = args.out.strides[last];
    float staged_x[kChunk], staged_y[kChunk];
    for (int64_t j = 0; j < width; j += kChunk) {
      const int64_t n = std::min(kChunk, width - j);
      float* dst = y_step == 1 ? y + j : staged_y;
      kMap(fn, stage(x, j, n, staged_x), dst, n);
      if (y_step != 1)
        for (int64_t i = 0; i < n; ++i) y[(j + i) * y_step] = staged_y[i];
    }
  });
  return absl::OkStatus();
}

template <BinaryMap kMap>
absl::Status binary_f32(const KernelArgs& args) {
  const BinaryFn fn = args.node.attrs_as<BinaryAttrs>().fn;
  if (args.node.rank() == 0) {
    kMap(fn, args.inputs[0].at<const float>(nullptr), args.inputs[1].at<const float>(nullptr),
         args.out.at<float>(nullptr), 1);
    return absl::OkStatus();
  }
  const int last = args.node.rank() - 1;
  for_runs(args, [&](const int64_t* index, int64_t width) {
    const RowOperand a = operand_row(args, 0, index), b = operand_row(args, 1, index);
    float* y = args.out.at<float>(index);
    const int64_t y_step = args.out.strides[last];
    float staged_a[kChunk], staged_b[kChunk], staged_y[kChunk];
    for (int64_t j = 0; j < width; j += kChunk) {
      const int64_t n = std::min(kChunk, width - j);
      float* dst = y_step == 1 ? y + j : staged_y;
      kMap(fn, stage(a, j, n, staged_a), stage(b, j, n, staged_b), dst, n);
      if (y_step != 1)
        for (int64_t i = 0; i < n; ++i) y[(j + i) * y_step] = staged_y[i];
    }
  });
  return absl::OkStatus();
}

// ---- cast between float dtypes -----------------------------------------------------------------
// The reference's values exactly: half types widen exactly, narrowing rounds to nearest even
// (float_to_half / float_to_bf16). The AVX2 path converts contiguous f32 -> f16 rows with F16C
// (the same rounding) and redoes NaN lanes with float_to_half (the hardware keeps NaN payloads).

template <DType kIn, DType kOut>
void cast_scalar(const void* x, int64_t x_step, void* y, int64_t y_step, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_float(kOut, y, i * y_step, float_at(kIn, x, i * x_step));
}

using CastRow = void (*)(const void* x, int64_t x_step, void* y, int64_t y_step, int64_t n);

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN
void cast_f32_f16_avx2(const void* xv, int64_t x_step, void* yv, int64_t y_step, int64_t n) {
  if (x_step != 1 || y_step != 1) return cast_scalar<DType::F32, DType::F16>(xv, x_step, yv, y_step, n);
  const float* x = static_cast<const float*>(xv);
  uint16_t* y = static_cast<uint16_t*>(yv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0)
      for (int64_t j = i; j < i + 8; ++j) y[j] = float_to_half(x[j]);
  }
  cast_scalar<DType::F32, DType::F16>(x + i, 1, y + i, 1, n - i);
}
TESSERA_AVX2_END
#endif  // TESSERA_HAVE_AVX2_PATHS

template <CastRow kRow>
absl::Status cast_rows(const KernelArgs& args) {
  const TensorView& x = args.inputs[0];
  if (args.node.rank() == 0) {
    kRow(x.data, 1, args.out.data, 1, 1);
    return absl::OkStatus();
  }
  const int last = args.node.rank() - 1;
  const int64_t width = args.box.extent(last);
  const int in_size = dtype_size(x.dtype), out_size = dtype_size(args.out.dtype);
  for_rows(args.box, [&](const int64_t* index) {
    kRow(static_cast<const std::byte*>(x.data) + x.offset(index) * in_size, x.strides[last],
         static_cast<std::byte*>(args.out.data) + args.out.offset(index) * out_size, args.out.strides[last], width);
  });
  return absl::OkStatus();
}

// ---- cast f32 -> q8_0 --------------------------------------------------------------------------
// quant::quantize_q8_0's values, a row of whole blocks at a time (the box's last axis is whole
// blocks: cast's rules); with AVX-512, avx512::quantize_q8_0 (quant_avx512.h).

void quantize_row_scalar(const float* x, uint8_t* out, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) quant::quantize_q8_0(x + 32 * b, out + 34 * b);
}

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX512_BEGIN
void quantize_row_avx512(const float* x, uint8_t* out, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) avx512::quantize_q8_0(x + 32 * b, out + 34 * b);
}
TESSERA_AVX512_END
#endif

using QuantizeRow = void (*)(const float* x, uint8_t* out, int64_t blocks);

template <QuantizeRow kRow>
absl::Status cast_q8_0_rows(const KernelArgs& args) {
  const TensorView& x = args.inputs[0];
  const int last = args.node.rank() - 1;
  if (x.strides[last] != 1 || args.out.strides[last] != 1 || args.box.begin(last) % 32 != 0 || args.box.extent(last) % 32 != 0)
    return absl::InvalidArgumentError("[cast] q8_0 rows are whole blocks, contiguous");
  const int64_t blocks = args.box.extent(last) / 32;
  for_rows(args.box, [&](const int64_t* index) {
    kRow(x.at<const float>(index), const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(element_address(args.out, index))),
         blocks);
  });
  return absl::OkStatus();
}

template <DType kIn>
KernelFn cast_from(DType out) {
  switch (out) {
    case DType::F32:
      return cast_rows<cast_scalar<kIn, DType::F32>>;
    case DType::F16:
      return cast_rows<cast_scalar<kIn, DType::F16>>;
    case DType::BF16:
      return cast_rows<cast_scalar<kIn, DType::BF16>>;
    default:
      return nullptr;
  }
}

}  // namespace elementwise

KernelFn cast_kernel(const Graph& graph, const Node& node, Isa isa) {
  const DType in = graph.node(node.inputs[0]).dtype;
  if (node.dtype == DType::Q8_0) {
    if (in != DType::F32) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
    if (isa >= Isa::Avx512) return elementwise::cast_q8_0_rows<elementwise::quantize_row_avx512>;
#endif
    return elementwise::cast_q8_0_rows<elementwise::quantize_row_scalar>;
  }
#if TESSERA_HAVE_AVX2_PATHS
  if (isa != Isa::Portable && in == DType::F32 && node.dtype == DType::F16)
    return elementwise::cast_rows<elementwise::cast_f32_f16_avx2>;
#endif
  (void)isa;
  switch (in) {
    case DType::F32:
      return elementwise::cast_from<DType::F32>(node.dtype);
    case DType::F16:
      return elementwise::cast_from<DType::F16>(node.dtype);
    case DType::BF16:
      return elementwise::cast_from<DType::BF16>(node.dtype);
    default:
      return nullptr;
  }
}

KernelFn unary_kernel(const Graph&, const Node& node, Isa isa) {
  if (node.dtype != DType::F32 || !elementwise::unary_covered(node.attrs_as<UnaryAttrs>().fn))
    return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa != Isa::Portable) return elementwise::unary_f32<elementwise::unary_map_avx2>;
#endif
  (void)isa;
  return elementwise::unary_f32<elementwise::unary_map_portable>;
}

KernelFn binary_kernel(const Graph& graph, const Node& node, Isa isa) {
  if (node.dtype != DType::F32 || graph.node(node.inputs[0]).dtype != DType::F32 ||
      !elementwise::binary_covered(node.attrs_as<BinaryAttrs>().fn))
    return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa != Isa::Portable) return elementwise::binary_f32<elementwise::binary_map_avx2>;
#endif
  (void)isa;
  return elementwise::binary_f32<elementwise::binary_map_portable>;
}

}  // namespace tessera::cpu
