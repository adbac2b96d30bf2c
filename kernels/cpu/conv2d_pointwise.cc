// 1x1 convs as a gemm (contract in conv2d_internal.h): the box's pixels packed (an L2-sized part
// at a time, partial rows one after another), then the Winograd kernel's gemm, 48 pixels
// (AVX-512) by 8 output channels per call, and the bias and epilogue per output row. TAEF2's
// 64 <-> 256 1x1 steps ran 139-152 us with the direct kernel, 111-131 here; a box of partial rows
// (an edit's 16x19 of a 16x20 map) 212 against ~175 us.
#include <algorithm>
#include <cstring>

#include "engine/ops.h"
#include "kernels/cpu/conv2d_internal.h"

namespace tessera::cpu::conv {

namespace {
constexpr int64_t kMaxOcb = 8, kMaxSpan = 48;  // the largest gemm block and span (AVX-512)
constexpr int64_t kPackFloats = 64 * 1024;      // packed input pixels x channels (256 KiB)
// Floats of the packed input: `pack` pixels (below) of every channel, at most one span past
// kPackFloats.
int64_t pack_floats(int64_t channels) { return kPackFloats + channels * kMaxSpan; }
}  // namespace

int64_t pointwise_scratch_bytes(int64_t channels, int64_t out_channels) {
  return scratch_take_bytes<float>(channels * (out_channels + kMaxOcb)) + scratch_take_bytes<float>(pack_floats(channels)) +
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
  float* x_pack = carver.take<float>(pack_floats(channels));
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
  // The box's pixels in row-major order, q = (h - h0) * cols + (w - w0): a flat row (one row of
  // every pixel) or a box of partial rows, whose pixels are packed one row after another.
  const int64_t h0 = box.begin(2), w0 = box.begin(3), cols = box.extent(3), pixels = box.extent(2) * cols;
  // Calls fn(h, w, at, len) for the image-row segments of pixels [q, q + count), at: offset from q.
  auto for_segments = [&](int64_t q, int64_t count, auto&& fn) {
    for (int64_t at = 0; at < count;) {
      const int64_t h = h0 + (q + at) / cols, w = w0 + (q + at) % cols, len = std::min(count - at, cols - (w - w0));
      fn(h, w, at, len);
      at += len;
    }
  };
  // Pixels packed at a time: whole gemm spans filling up to kPackFloats (L2-resident), so that
  // the packing reads each input plane in runs the prefetchers follow.
  const int64_t pack = std::max<int64_t>(span, kPackFloats / channels / span * span);
  for (int64_t n = box.begin(0); n < box.end(0); ++n)
    for (int64_t q0 = 0; q0 < pixels; q0 += pack) {
      const int64_t packed = std::min(pack, pixels - q0), padded = (packed + lanes - 1) / lanes * lanes;
      for (int64_t c = 0; c < channels; ++c) {  // zero-padded to whole vectors
        float* dst = x_pack + c * pack;
        for_segments(q0, packed, [&](int64_t h, int64_t w, int64_t at, int64_t len) {
          const int64_t x_at[4] = {n, c, h, w};
          const float* src = x.at<const float>(x_at);
          if (x.strides[3] == 1) {
            std::memcpy(dst + at, src, sizeof(float) * static_cast<size_t>(len));
          } else {
            for (int64_t k = 0; k < len; ++k) dst[at + k] = src[k * x.strides[3]];
          }
        });
        std::fill(dst + packed, dst + padded, 0.0f);
      }
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t o0 = o_begin + b * ocb, rows = std::min(ocb, o_end - o0);
        for (int64_t q = 0; q < packed; q += span) {
          const int64_t count = std::min(span, packed - q), vectors = (count + lanes - 1) / lanes;
          // A whole block of whole vectors of one output row is written in place; otherwise
          // through m_part.
          const int64_t h = h0 + (q0 + q) / cols, w = w0 + (q0 + q) % cols;
          const bool in_place = rows == ocb && count == vectors * lanes && out.strides[3] == 1 && w - w0 + count <= cols;
          const int64_t out_at[4] = {n, o0, h, w};
          float* m = in_place ? out.at<float>(out_at) : m_part;
          const int64_t m_stride = in_place ? out.strides[1] : span;
          table.gemm[vectors - 1](u + b * channels * ocb, ocb, x_pack + q, pack, channels, m, m_stride);
          for (int64_t j = 0; j < rows; ++j) {
            const int64_t o = o0 + j;
            float* row = m + j * m_stride;
            if (bias != nullptr) table.bias(row, count, *bias->at<const float>(&o));  // the micro-kernel's add(acc, bias)
            for_segments(q0 + q, count, [&](int64_t sh, int64_t sw, int64_t at, int64_t len) {
              const int64_t dst_at[4] = {n, o, sh, sw};
              float* dst = out.at<float>(dst_at);
              if (epilogue.residual != nullptr) {
                epilogue.finish(row + at, len, dst, out.strides[3], n, o, sh, sw);
              } else if (out.strides[3] == 1) {
                table.finish(row + at, len, nullptr, false, attrs.relu, dst);
              } else {
                for (int64_t k = 0; k < len; ++k)
                  dst[k * out.strides[3]] = epilogue_value(row[at + k], nullptr, false, attrs.relu);
              }
            });
          }
        }
      }
    }
  return absl::OkStatus();
}

}  // namespace tessera::cpu::conv
