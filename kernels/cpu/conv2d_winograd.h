// The Winograd conv2d's per-instruction-set operations: conv2d_winograd.cc runs the kernel
// over them, conv2d_winograd_simd.cc builds them from the vector code of conv2d_winograd.inc.
#pragma once

#include <cstdint>

#include "kernels/cpu/conv2d_internal.h"

namespace tessera::cpu::conv {

// A run of one output row of a chunk: `count` outputs from out_row[row] + src to dst + dst_at of
// the channel's output (and residual + residual_at of its residual), unit steps.
struct OutRun {
  int64_t row, count, src, dst_at, residual_at;
};

// One instruction set's vector code: lanes per vector, the gemm's register block and the
// kernel's steps (conv2d_winograd.inc documents each).
struct WinogradOps {
  int lanes = 8;
  int ocb = 1;           // output channels per gemm call
  int gemm_vectors = 2;  // the most vectors of tiles per gemm call (2 or 3)
  PairsFn deinterleave = nullptr;  // stride-2 spans (scatter_phases)
  // p_r[i] = src[4 i + r] for i < quads (4x4 tiles' packed rows).
  void (*deinterleave4)(const float* src, int64_t quads, float* p0, float* p1, float* p2, float* p3) = nullptr;
  // A segment's rows of every channel when they lie inside the image and the view (pack_rows).
  void (*pack_pairs)(const float* src, int64_t src_channel, int64_t src_row, int64_t channels, int64_t rows,
                     int64_t pairs, float* dst, int64_t phase_len) = nullptr;
  // A segment of 2x2 tiles whose span is at most 4 vectors, anywhere (pack_rows).
  void (*pack_narrow)(const float* src, int64_t src_channel, int64_t src_row, int64_t channels, int64_t rows,
                      int64_t r_lo, int64_t r_hi, int64_t k_lo, int64_t k_hi, int64_t span, float* dst,
                      int64_t phase_len) = nullptr;
  // [0]: F(2, 3), [1]: F(2, 5), [2]: F(4, 3).
  void (*input_transform[3])(const float* const* rows, int64_t phase_len, int64_t vectors, const uint32_t* keep,
                             float* v, int64_t xi_stride) = {};
  // gemm[k - 1]: k vectors of tiles (gemm[2] takes gemm_vectors; GemmFn in conv2d_internal.h).
  GemmFn gemm[3] = {};
  // Y = A^T M A + bias, then relu when `relu` (the epilogue without a residual).
  void (*output_transform[3])(const float* m, int64_t xi_stride, int64_t vectors, const float* bias, bool relu,
                              float* const* out) = {};
  FinishFn finish = nullptr;  // the direct kernel's table's, of the same instruction set
  // One output channel's runs of a chunk: dst[run.dst_at + i] = out_row[run.row][run.src + i],
  // plus the residual (in its order) and relu when `residual` is given, as Epilogue::finish.
  void (*store_runs)(float* const* out_row, const OutRun* runs, int64_t count, float* dst, const float* residual,
                     bool residual_first, bool relu) = nullptr;
};

#if defined(__x86_64__)
// The AVX2 and AVX-512 operations (`finish` unset: the kernel takes its instruction set's micro
// table's).
const WinogradOps& avx2_winograd_ops();
const WinogradOps& avx512_winograd_ops();
#endif

}  // namespace tessera::cpu::conv
