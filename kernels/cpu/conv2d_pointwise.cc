// 1x1 convs over flat rows as a gemm (contract in conv2d_internal.h). The direct kernel packs
// each chunk's rows and walks its register blocks per chunk, ~70 GFLOP/s on 64 -> 256 channels;
// the Winograd kernel's gemm reads the input rows in place, 48 pixels (AVX-512) by 8 output
// channels per call.
#include <algorithm>
#include <cstring>

#include "engine/ops.h"
#include "kernels/cpu/conv2d_internal.h"

namespace tessera::cpu::conv {

namespace {
constexpr int64_t kMaxOcb = 8, kMaxSpan = 48;  // the largest gemm block and span (AVX-512)
constexpr int64_t kPackFloats = 64 * 1024;      // packed input pixels x channels (256 KiB)
}  // namespace

int64_t pointwise_scratch_bytes(int64_t channels, int64_t out_channels) {
  return scratch_take_bytes<float>(channels * (out_channels + kMaxOcb)) +
         scratch_take_bytes<float>(std::max(kPackFloats + channels * kMaxSpan, channels * kMaxSpan)) +
         scratch_take_bytes<float>(kMaxOcb * kMaxSpan);
}

void pointwise_weights(const float* w, int64_t o_step, int64_t c_step, int64_t channels, int64_t out_channels,
                       int64_t ocb, float* u) {
  const int64_t blocks = (out_channels + ocb - 1) / ocb;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t j = 0; j < ocb; ++j) {
        const int64_t o = b * ocb + j;
        u[(b * channels + c) * ocb + j] = o < out_channels ? w[o * o_step + c * c_step] : 0.0f;
      }
}

absl::Status pointwise_gemm(const Conv2dAttrs& attrs, std::span<const KernelInput> inputs, const TensorView& out,
                            const Box& box, const MicroTable& table, const float* prepared, std::span<std::byte> scratch) {
  const KernelInput& x = inputs[0];
  const KernelInput& w = inputs[1];
  const TensorView* bias = attrs.has_bias(inputs.size()) ? &inputs[2] : nullptr;
  const Epilogue epilogue(attrs, inputs, table.finish);
  const int64_t channels = w.shape[1], ocb = table.gemm_ocb, lanes = table.lanes;
  const int64_t span = table.gemm_vectors * lanes;  // pixels per gemm call
  const int64_t o_begin = box.begin(1), o_end = box.end(1), blocks = (o_end - o_begin + ocb - 1) / ocb;
  ScratchCarver carver(scratch);
  float* u_own = carver.take<float>(blocks * channels * ocb);
  const float* u = u_own;
  float* x_pack = carver.take<float>(std::max(kPackFloats + channels * kMaxSpan, channels * kMaxSpan));
  float* m_part = carver.take<float>(ocb * span);
  if (u_own == nullptr || x_pack == nullptr || m_part == nullptr) return absl::InternalError("[conv2d] kernel scratch too small");
  // u[(b * channels + c) * ocb + j] = w[o_begin + b * ocb + j][c], zero past o_end: the prepared
  // blocks when the box starts at one, else transposed here.
  if (prepared != nullptr && o_begin % ocb == 0) {
    u = prepared + o_begin / ocb * channels * ocb;
  } else {
    const int64_t at[4] = {o_begin, 0, 0, 0};
    pointwise_weights(w.at<const float>(at), w.strides[0], w.strides[1], channels, o_end - o_begin, ocb, u_own);
  }
  const int64_t p_begin = box.begin(3), p_end = box.end(3);
  // Pixels packed at a time: whole gemm spans filling up to kPackFloats (L2-resident), so that
  // the packing reads each input plane in runs the prefetchers follow.
  const int64_t pack = std::max<int64_t>(span, kPackFloats / channels / span * span);
  for (int64_t n = box.begin(0); n < box.end(0); ++n)
    for (int64_t p0 = p_begin; p0 < p_end; p0 += pack) {
      const int64_t packed = std::min(pack, p_end - p0), padded = (packed + lanes - 1) / lanes * lanes;
      const int64_t x_at[4] = {n, 0, 0, p0};
      const float* src = x.at<const float>(x_at);
      for (int64_t c = 0; c < channels; ++c) {  // zero-padded to whole vectors
        std::memcpy(x_pack + c * pack, src + c * x.strides[1], sizeof(float) * static_cast<size_t>(packed));
        std::fill(x_pack + c * pack + packed, x_pack + c * pack + padded, 0.0f);
      }
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t o0 = o_begin + b * ocb, rows = std::min(ocb, o_end - o0);
        for (int64_t q = 0; q < packed; q += span) {
          const int64_t p = p0 + q, count = std::min(span, packed - q), vectors = (count + lanes - 1) / lanes;
          const int64_t out_at[4] = {n, o0, 0, p};
          // A whole block of whole vectors is written in place; otherwise through m_part.
          const bool in_place = rows == ocb && count == vectors * lanes && out.strides[3] == 1;
          float* m = in_place ? out.at<float>(out_at) : m_part;
          const int64_t m_stride = in_place ? out.strides[1] : span;
          table.gemm[vectors - 1](u + b * channels * ocb, ocb, x_pack + q, pack, channels, m, m_stride);
          for (int64_t j = 0; j < rows; ++j) {
            const int64_t o = o0 + j;
            float* row = m + j * m_stride;
            if (bias != nullptr) table.bias(row, count, *bias->at<const float>(&o));  // the micro-kernel's add(acc, bias)
            const int64_t dst_at[4] = {n, o, 0, p};
            float* dst = out.at<float>(dst_at);
            if (epilogue.residual != nullptr) {
              epilogue.finish(row, count, dst, out.strides[3], n, o, 0, p);
            } else if (out.strides[3] == 1) {
              table.finish(row, count, nullptr, false, attrs.relu, dst);
            } else {
              for (int64_t i = 0; i < count; ++i) dst[i * out.strides[3]] = epilogue_value(row[i], nullptr, false, attrs.relu);
            }
          }
        }
      }
    }
  return absl::OkStatus();
}

}  // namespace tessera::cpu::conv
