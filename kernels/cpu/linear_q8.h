// Linear with integer dot products on quantised activations (the fast path of linear.cc for the
// block-quantised weight dtypes Q8_0, Q5_0, Q4_1, Q4_K and Q6_K).
//
// Each call quantises the x rows it needs, once, into int8 blocks in its scratch: per block of
// A elements (A = 32 for the 32-element weight blocks, 256 for the K-quants) a float scale
// d = amax / 127 and q = nearbyint(x * (127 / amax)); plus the integer sum of every 32 q.
// Then every weight block contributes, per x row, eight exact int32 lanes
//   L[l] = sum over the block's 32-element groups g of sum_{i < 4} s(e) * w(e) * q(e),
//   e = 32 g + 4 l + i, s(e) the block's integer sub-scale of e (1 for 32-element blocks),
// and a float factor dd = d_w * d_x; types with an offset term also two floats mm, mv (Q4_1:
// m_w and d_x * sum(q); Q4_K: -(dmin_w * d_x) and float(sum_s min_s * sum(q of s))). The float
// combination is one fixed sequence per output element:
//   acc[b % 2][l] = fma(float(L[l]), dd, acc[b % 2][l])   for blocks b = 0, 1, ... in order,
//   macc = fma(mm, mv, macc),
//   out = hsum(acc[0] + acc[1]) (+ macc),   hsum the fixed order of avx2::hsum.
// The portable, AVX2 (vpmaddubsw / vpmaddwd) and AVX-512 VNNI (vpdpbusd) paths compute the same
// integers and the same float operations, so they agree bit for bit, and no box, tile or thread
// count changes a value. On AVX-512 VNNI a single x row (decode) of Q8_0, Q5_0 or Q4_1 weights
// runs a 512-bit body holding blocks b and b + 1 (acc[0] and acc[1]) in one register
// (linear_q8_row512.inc): the same values with about half the instructions. The results differ
// from the f32-activation path (the activations are rounded to 8 bits), so the path is opt-in:
// TESSERA_LINEAR=int8 in the environment (see linear_int8_activations in cpu_kernels.h).
// Precision: on real inputs each linear's outputs equal the scheme evaluated exactly to ~1e-7
// (relative RMS) and differ from f32 activations by ~0.4-1% (V projections up to ~2.7%), as
// llama.cpp's q8_0/q8_1 activations do; through 30 layers SmolLM2-135M's logits move by ~0.8,
// mostly a common shift, which flips its near-ties (its chat answer to "What is the capital of
// France?" has a top-2 gap of 0.08 and starts with "L'" here and in llama.cpp alike).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/dtype.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tessera::cpu::q8 {

// Elements per activation scale for weights of `dtype` (32 or 256); 0 when the dtype has no
// integer path.
int64_t activation_block(DType dtype);

// Where the parts of one quantised row of K elements sit in scratch (64-byte aligned parts).
struct RowLayout {
  RowLayout(int64_t depth, int64_t block);
  int64_t depth = 0, block = 0;
  int64_t d_offset = 0, sums_offset = 0, scaled_sums_offset = 0;
  int64_t pair_scales_offset = 0, pair_offsets_offset = 0, row_bytes = 0;
};

// A quantised activation row: q[K], d[K / block], sums[K / 32] and scaled_sums[K / 32] (each
// sum times its block's d, the offset term of Q4_1). The one-row AVX-512 VNNI body also reads
// pair_scales (8 copies of each d, padded to an even block count) and pair_offsets (8 int32 per
// 32 elements; see linear_q8_row512.inc), which only its own quantisation fills.
struct QRow {
  const int8_t* q;
  const float* d;
  const int32_t* sums;
  const float* scaled_sums;
  const float* pair_scales;
  const int32_t* pair_offsets;
};

inline QRow qrow(const std::byte* base, const RowLayout& layout) {
  return QRow{reinterpret_cast<const int8_t*>(base),
              reinterpret_cast<const float*>(base + layout.d_offset),
              reinterpret_cast<const int32_t*>(base + layout.sums_offset),
              reinterpret_cast<const float*>(base + layout.scaled_sums_offset),
              reinterpret_cast<const float*>(base + layout.pair_scales_offset),
              reinterpret_cast<const int32_t*>(base + layout.pair_offsets_offset)};
}

// The eight 6-bit scales and mins of a Q4_K block from its 12 scale bytes (layout in
// kernels/quant.cc).
inline void k_scale_min(const uint8_t* bytes, int* scale, int* min) {
  for (int j = 0; j < 4; ++j) {
    scale[j] = bytes[j] & 63;
    min[j] = bytes[j + 4] & 63;
    scale[j + 4] = (bytes[j + 8] & 0x0F) | ((bytes[j] >> 6) << 4);
    min[j + 4] = (bytes[j + 8] >> 4) | ((bytes[j + 4] >> 6) << 4);
  }
}

// Quantises K floats x[0], x[step], ... into the row at dst (portable code; the SIMD twins give
// the same bytes).
void quantize_row_portable(const float* x, int64_t step, const RowLayout& layout, std::byte* dst);

// The kernel for weights of `dtype` (activation_block(dtype) != 0) on `isa`.
KernelFn kernel(DType dtype, Isa isa);
// Scratch bytes of one call for weights of `dtype`, depth K and at most `rows` x rows.
int64_t scratch_bytes(DType dtype, int64_t depth, int64_t rows);

}  // namespace tessera::cpu::q8
