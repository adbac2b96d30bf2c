// The parts of the f32 conv2d shared by the direct kernel (conv2d.cc) and the Winograd kernel
// (conv2d_winograd.cc): the portable micro-kernel table, the epilogue (a residual added in the
// written order, then relu) and the scatter of input rows into stride phases. Contracts in
// conv2d_internal.h.
#include <cstring>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/ops.h"
#include "kernels/cpu/conv2d_internal.h"

namespace tessera::cpu {

namespace conv {
namespace portable {
namespace {

// Written for GCC's vectoriser: fixed-size lane loops over plain arrays.
constexpr int kLanes = 8, kMaxChannels = 4, kMaxVectors = 2;

template <int kChannels, int kVectors, int kTaps>
void micro(const ConvTile& t, int64_t q0, int64_t count, float* out, int64_t out_stride) {
  const int64_t taps = kTaps > 0 ? kTaps : t.kernel_w;
  constexpr int kWidth = kVectors * kLanes;
  float acc[kChannels][kWidth] = {};
  const int64_t ws_o = t.weight_strides[0], ws_w = t.weight_strides[3];
  for (int64_t c = 0; c < t.channels; ++c) {
    for (int64_t kh = 0; kh < t.kernel_h; ++kh) {
      const float* row = t.rows + c * t.channel_stride + t.row_offset[kh] + q0;
      const float* w = t.weight + c * t.weight_strides[1] + kh * t.weight_strides[2];
      for (int64_t kw = 0; kw < taps; ++kw) {
        const float* x = row + t.tap_offset[kw];
        for (int j = 0; j < kChannels; ++j) {
          const float b = w[kw * ws_w + j * ws_o];
          for (int i = 0; i < kWidth; ++i) acc[j][i] += x[i] * b;
        }
      }
    }
  }
  for (int j = 0; j < kChannels; ++j) {
    float* dst = out + j * out_stride;
    if (t.bias != nullptr) {
      const float b = t.bias[j * t.bias_stride];
      for (int64_t i = 0; i < count; ++i) dst[i] = acc[j][i] + b;
    } else {
      for (int64_t i = 0; i < count; ++i) dst[i] = acc[j][i];
    }
    if (t.relu)
      for (int64_t i = 0; i < count; ++i) dst[i] = conv::epilogue_value(dst[i], nullptr, false, true);
  }
}

template <int kTaps, size_t... kIndex>
void fill_table(MicroFn* fns, std::index_sequence<kIndex...>) {
  ((fns[kIndex] = &micro<static_cast<int>(kIndex) / kMaxVectors + 1,
                         static_cast<int>(kIndex) % kMaxVectors + 1, kTaps>),
   ...);
}

// even[i] = src[2 i], odd[i] = src[2 i + 1] (PairsFn): four pairs at a time with SSE shuffles
// (x86-64 baseline), the portable table's.
void pairs_sse(const float* src, int64_t pairs, float* even, float* odd) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= pairs; i += 4) {
    const __m128 a = _mm_loadu_ps(src + 2 * i), b = _mm_loadu_ps(src + 2 * i + 4);
    _mm_storeu_ps(even + i, _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm_storeu_ps(odd + i, _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
#endif
  for (; i < pairs; ++i) {
    even[i] = src[2 * i];
    odd[i] = src[2 * i + 1];
  }
}

void finish_rows(const float* src, int64_t count, const float* residual, bool residual_first, bool relu, float* dst) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = conv::epilogue_value(src[i], residual != nullptr ? residual + i : nullptr, residual_first, relu);
}

MicroTable make_table() {
  MicroTable table;
  table.pairs = &pairs_sse;
  table.finish = &finish_rows;
  table.lanes = kLanes;
  table.max_channels = kMaxChannels;
  table.max_vectors = kMaxVectors;
  constexpr auto blocks = std::make_index_sequence<kMaxChannels * kMaxVectors>();
  fill_table<0>(table.fns[0], blocks);
  fill_table<1>(table.fns[1], blocks);
  fill_table<3>(table.fns[2], blocks);
  fill_table<5>(table.fns[3], blocks);
  return table;
}

}  // namespace
}  // namespace portable

const MicroTable& portable_micro_table() {
  static const MicroTable table = portable::make_table();
  return table;
}

Epilogue::Epilogue(const Conv2dAttrs& attrs, std::span<const KernelInput> inputs, FinishFn rows)
    : residual_first(attrs.residual == ConvResidual::ResidualFirst), relu(attrs.relu), rows(rows) {
  if (const int r = attrs.residual_input(inputs.size()); r >= 0) residual = &inputs[static_cast<size_t>(r)];
}

void Epilogue::finish(const float* src, int64_t count, float* dst, int64_t dst_step, int64_t n, int64_t o, int64_t oh,
                      int64_t ow) const {
  const int64_t at[4] = {n, o, oh, ow};
  const float* r = residual != nullptr ? residual->at<const float>(at) : nullptr;
  const int64_t r_step = residual != nullptr ? residual->strides[3] : 0;
  if (dst_step == 1 && (r == nullptr || r_step == 1)) return rows(src, count, r, residual_first, relu, dst);
  for (int64_t i = 0; i < count; ++i)
    dst[i * dst_step] = epilogue_value(src[i], r != nullptr ? r + i * r_step : nullptr, residual_first, relu);
}

void Epilogue::prefetch(int64_t n, int64_t o_begin, int64_t o_end, int64_t oh, int64_t ow_begin, int64_t ow_end) const {
  if (residual == nullptr || ow_begin >= ow_end) return;
  const int64_t step = residual->strides[3] * static_cast<int64_t>(sizeof(float));
  for (int64_t o = o_begin; o < o_end; ++o) {
    const int64_t at[4] = {n, o, oh, ow_begin};
    const char* p = reinterpret_cast<const char*>(residual->at<const float>(at));
    const int64_t bytes = (ow_end - ow_begin - 1) * step + static_cast<int64_t>(sizeof(float));
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
    __builtin_prefetch(p + bytes - 1);
  }
}

void scatter_phases(const float* src, int64_t step, int64_t lo, int64_t hi, int64_t first, int64_t stride,
                    float* dst, int64_t phase_len, PairsFn pairs) {
  if (lo >= hi) return;
  if (stride == 1 && step == 1) {
    std::memcpy(dst + (lo - first), src, sizeof(float) * static_cast<size_t>(hi - lo));
    return;
  }
  const int64_t k_lo = lo - first, k_hi = hi - first;  // column first + k: phase k % stride, entry k / stride
  int64_t k = k_lo;
  if (stride == 2 && step == 1) {
    if (k % 2 == 1) {
      dst[phase_len + k / 2] = src[0];
      ++k;
    }
    const int64_t count = (k_hi - k) / 2;
    pairs(src + (k - k_lo), count, dst + k / 2, dst + phase_len + k / 2);
    k += 2 * count;
  }
  for (int64_t phase = k % stride, entry = k / stride; k < k_hi; ++k) {
    dst[phase * phase_len + entry] = src[(k - k_lo) * step];
    if (++phase == stride) {
      phase = 0;
      ++entry;
    }
  }
}

}  // namespace conv

}  // namespace tessera::cpu
