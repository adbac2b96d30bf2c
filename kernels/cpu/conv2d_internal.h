// Internal to the f32 conv2d kernel (conv2d.cc, conv2d_simd.cc): the packed-input tile a
// micro-kernel reads and the per-instruction-set tables of micro-kernels.
//
// A micro-kernel computes a block of `ocb` output channels x `wv` vectors of output pixels along
// one output row. For every output element it runs acc = 0, then acc = acc + x * w (one FMA on
// AVX2 / AVX-512, a multiply then an add when portable) over the taps in the fixed order
// (input channel, kh, kw), every tap included: taps in the zero padding read packed zeros. The
// block shape never changes which operations an element gets, only which elements share loads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "engine/ops.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tessera::cpu::conv {

// Largest block of any instruction set (accumulator buffer sizes).
constexpr int kMaxBlockChannels = 8;
constexpr int kMaxBlockPixels = 64;

// One output row's input, packed: for input channel c (of the group) and kernel row kh, the
// input row it reads starts at rows + c * channel_stride + row_offset[kh] and holds the
// zero-padded input row split into `stride_w` phases of `phase_len` floats (phase r, entry j:
// padded column col0 + r + stride_w j). Output pixel q (counted from the chunk's first column)
// at tap kw reads entry q + tap_offset[kw].
struct ConvTile {
  const float* rows = nullptr;
  int64_t channel_stride = 0;
  int64_t channels = 0;  // input channels per group
  int64_t kernel_h = 0, kernel_w = 0;
  const int64_t* row_offset = nullptr;  // [kernel_h]
  const int64_t* tap_offset = nullptr;  // [kernel_w]
  const float* weight = nullptr;        // weight[o0][0][0][0] of the block's first channel
  int64_t weight_strides[4] = {};       // elements: o, c, kh, kw
  const float* bias = nullptr;          // bias[o0], nullptr without bias
  int64_t bias_stride = 0;
  bool relu = false;                    // relu after the bias (the epilogue without a residual)
};

// Computes the block at pixel offset `q0` and writes acc (+ bias) of channel j < ocb, pixel
// i < count to out[j * out_stride + i] (count in ((wv - 1) * lanes, wv * lanes]).
using MicroFn = void (*)(const ConvTile& tile, int64_t q0, int64_t count, float* out,
                         int64_t out_stride);

// Micro-kernels compiled for a fixed kernel width (unrolled tap loop) and for any.
enum class Taps { Any = 0, One = 1, Three = 2, Five = 3 };
inline Taps taps_of(int64_t kernel_w) {
  return kernel_w == 1   ? Taps::One
         : kernel_w == 3 ? Taps::Three
         : kernel_w == 5 ? Taps::Five
                         : Taps::Any;
}

// even[i] = src[2 i], odd[i] = src[2 i + 1] for i < pairs.
using PairsFn = void (*)(const float* src, int64_t pairs, float* even, float* odd);

// One output of the epilogue, as the decomposition computes it: y + r (or r + y) when there is a
// residual, in float, then relu (y > 0 ? y : 0: NaN and -0 to +0). The scalar form every
// epilogue path shares (the vector rows compute the same per lane).
inline float epilogue_value(float y, const float* r, bool residual_first, bool relu) {
  if (r != nullptr) y = residual_first ? *r + y : y + *r;
  return relu ? (y > 0 ? y : 0.0f) : y;
}

// Epilogue::finish's rows with unit steps, in an instruction set's vectors: dst[i] =
// relu?(src[i] (+ residual[i], in order)); residual may be nullptr, src may be dst.
using FinishFn = void (*)(const float* src, int64_t count, const float* residual, bool residual_first, bool relu,
                          float* dst);

// M[j][t] = sum over c of u[c * u_stride + j] * v[c * v_stride + t] for the gemm's block of
// output channels j and `vectors` vectors of t (the Winograd kernel's channel sums,
// conv2d_winograd.inc: acc = 0, one FMA per channel in increasing order), stored at
// m + j * m_stride + t.
using GemmFn = void (*)(const float* u, int64_t u_stride, const float* v, int64_t v_stride, int64_t channels,
                        float* m, int64_t m_stride);

struct MicroTable {
  int lanes = 8;         // floats per vector
  int max_channels = 1;  // largest ocb
  int max_vectors = 1;   // largest wv
  PairsFn pairs = nullptr;  // the instruction set's pair split (stride-2 input rows)
  FinishFn finish = nullptr;  // the instruction set's epilogue rows
  // The Winograd kernel's gemm (gemm[k - 1]: k vectors, k <= gemm_vectors) over blocks of
  // gemm_ocb output channels: 1x1 convs over flat rows (pointwise_gemm); unset for portable.
  GemmFn gemm[3] = {};
  int gemm_ocb = 0, gemm_vectors = 0;
  void (*bias)(float* row, int64_t count, float b) = nullptr;  // row[i] += b, in the set's vectors
  // fns[taps][(ocb - 1) * max_vectors + (wv - 1)]
  MicroFn fns[4][kMaxBlockChannels * 4] = {};
  MicroFn at(Taps taps, int ocb, int wv) const {
    return fns[static_cast<int>(taps)][(ocb - 1) * max_vectors + (wv - 1)];
  }
};

const MicroTable& portable_micro_table();

// Input columns [lo, hi) of one row (src: column lo, elements `step` floats apart) into the
// phases of a packed row of stride `stride` (the layout of ConvTile, and of the Winograd
// kernel's stride-2 spans): phase r at dst + r * phase_len, its entry j holding column first + r
// + stride j (first <= lo). Entries of columns outside [lo, hi) keep what they hold. A stride-2
// row of contiguous columns goes through `pairs` (the caller's instruction set).
void scatter_phases(const float* src, int64_t step, int64_t lo, int64_t hi, int64_t first, int64_t stride,
                    float* dst, int64_t phase_len, PairsFn pairs);

// Conv2dAttrs' epilogue for one kernel call: the residual view (nullptr: none), its order,
// relu. Without a residual the kernels apply relu themselves, after the bias (ConvTile::relu,
// the Winograd output transform); with one, finish() takes `count` outputs of one row holding
// conv + bias (src, contiguous) to dst (`dst_step` floats apart; src may be dst when dst_step
// is 1) as the decomposition computes them: y = y + r (or r + y) in float, then relu (y > 0 ?
// y : 0, NaN and -0 to +0). The output at dst is element (n, o, oh, ow) of the conv; the
// residual's is read at the same index.
struct Epilogue {
  const TensorView* residual = nullptr;
  bool residual_first = false;
  bool relu = false;
  FinishFn rows = nullptr;  // unit-step rows (the kernel's instruction set)

  Epilogue(const Conv2dAttrs& attrs, std::span<const KernelInput> inputs, FinishFn rows);
  void finish(const float* src, int64_t count, float* dst, int64_t dst_step, int64_t n, int64_t o, int64_t oh,
              int64_t ow) const;
  // Fetches the residual's columns [ow_begin, ow_end) of rows (n, o, oh) for o in [o_begin,
  // o_end) into the cache ahead of their finish(): kernels produce a row for every channel
  // before moving on, an access the hardware prefetchers do not follow.
  void prefetch(int64_t n, int64_t o_begin, int64_t o_end, int64_t oh, int64_t ow_begin, int64_t ow_end) const;
};

// A 1x1 conv of stride 1, no padding and one group over `box` (flat rows, conv2d.cc's
// flat_view: one row of all the box's pixels per sample and channel; or any box, whose pixels
// are packed row after row), as table.gemm over blocks of output channels and of pixels: the direct micro-kernel's operations
// per element (acc = 0, an FMA per input channel in increasing order, + bias, then the
// epilogue), so its bits are the direct kernel's. `prepared`: pointwise_weights of all output
// channels (nullptr: the box's are transposed into scratch, pointwise_scratch_bytes).
absl::Status pointwise_gemm(const Conv2dAttrs& attrs, std::span<const KernelInput> inputs, const TensorView& out,
                            const Box& box, const MicroTable& table, const float* prepared, std::span<std::byte> scratch);
int64_t pointwise_scratch_bytes(int64_t channels, int64_t out_channels);
// The gemm's weights: u[(b * channels + c) * ocb + j] = w[(b * ocb + j) * o_step + c * c_step]
// for blocks b of ocb output channels, zero past out_channels.
void pointwise_weights(const float* w, int64_t o_step, int64_t c_step, int64_t channels, int64_t out_channels,
                       int64_t ocb, float* u);

// The Winograd F(2x2, 3x3) or F(2x2, 5x5) kernel (conv2d_winograd.cc) for a 3x3 or 5x5 f32 conv
// of stride 1, dilation 1, one group and at least 8 input and output channels, with AVX2 or
// AVX-512; nullptr otherwise.
KernelFn winograd_kernel(const Graph& graph, const Node& node, Isa isa);
// Its scratch bound (0 when the node has no Winograd kernel).
int64_t winograd_scratch_bytes(const Graph& graph, const Node& node);
// Its transformed weights, prepared once when the weight is a constant (prepare_node_data).
int64_t winograd_prepared_bytes(const Graph& graph, const Node& node, KernelFn kernel);
std::shared_ptr<const void> winograd_prepare(const Graph& graph, const Node& node, KernelFn kernel);
#if defined(__x86_64__)
const MicroTable& avx2_micro_table();
const MicroTable& avx512_micro_table();
// The Winograd kernels' pair splits (conv2d_winograd.cc), which the direct kernel's tables share.
PairsFn avx2_pairs();
PairsFn avx512_pairs();
#endif

}  // namespace tessera::cpu::conv
