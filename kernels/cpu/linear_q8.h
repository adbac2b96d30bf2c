// Linear with integer dot products on quantised activations (the fast path of linear.cc for the
// block-quantised weight dtypes: all eight GGUF types of kernels/quant.h, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K and Q6_K).
//
// Activations. Each call quantises the x rows it needs, once, into int8 blocks in its scratch:
// per block of A elements (A = 32 for the 32-element weight blocks, 256 for the K-quants) a
// float scale d = amax / 127 and q = nearbyint(x * (127 / amax)); plus the integer sums of every
// 16 and every 32 q, and each 32-sum times its block's d (the offset term of Q4_1).
//
// Weights. The kernel reads weights repacked into panels of 16 rows (pack_panel), stored in
// quads of four panels (below) block by block: per weight block, the 16 rows' scales side by
// side and their integer values interleaved so that 64 bytes hold 4 consecutive elements of
// each of the 16 rows, one int32 lane per row (the operand of one vpdpbusd against 4 broadcast
// activations).
// The cpu backend packs a constant weight once, into huge-page memory (KernelNode::prepared);
// without it the kernel packs the panels it needs into its scratch, which gives the same bits.
//
// Arithmetic. Per output element (x row, weight row) and weight block b in order, an exact
// integer S_b (the block's integer weights times the q, with the K-quants' integer sub-scales):
//   S_b = sum_k w_k q_k            Q8_0 (w signed), Q4_0 (w - 8), Q5_0 (w - 16), Q4_1 and Q5_1 (w)
//   S_b = sum_s sc_s sum_{k in s} w_k q_k    Q4_K and Q5_K (32-element s, w), Q6_K (16, w - 32)
// then one float sequence:
//   acc = fma(float(S_b), d_w(b) * d_x(b), acc)
//   Q4_1, Q5_1: macc = fma(m_w(b), d_x(b) * sum(q in b), macc)
//   Q4_K, Q5_K: macc = fma(-(dmin_w(b) * d_x(b)), float(sum_s min_s * sum(q in s)), macc)
//   out = acc (+ macc)
// The portable, AVX2 and AVX-512 VNNI paths compute the same integers and the same float
// operations, so they agree bit for bit, and no box, tile, panel or thread count changes a value.
// The results differ from the f32-activation path (the activations are rounded to 8 bits), so
// the path is opt-in: TESSERA_LINEAR=int8 in the environment (see LinearPath in cpu_kernels.h);
// the default runs the same kernels on 24-bit activations (digits_kernel, below).
// Int8 precision: on real inputs each linear's outputs equal the scheme evaluated
// exactly to ~1e-7 (relative RMS) and differ from f32 activations by ~0.4-1% (V projections up to
// ~2.7%), as llama.cpp's q8_0/q8_1 activations do; through 30 layers SmolLM2-135M's top logits
// move by up to ~0.7 and Gemma-3-270M's (18 layers, larger activations) by up to ~1.1, mostly a
// common shift, which flips near-ties (SmolLM2's chat answer to "What is the capital of
// France?" has a top-2 gap of 0.08 and starts with "L'" here and in llama.cpp alike).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/dtype.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tessera::cpu::q8 {

// Elements per activation scale for weights of `dtype` (32 or 256); 0 when the dtype has no
// integer path.
constexpr int64_t activation_block(DType dtype) {
  switch (dtype) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
      return 32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return 256;
    default:
      return 0;
  }
}

// Whether the dtype's blocks have a min (offset) term, accumulated apart (macc below).
constexpr bool has_min(DType dtype) {
  return dtype == DType::Q4_1 || dtype == DType::Q5_1 || dtype == DType::Q4_K || dtype == DType::Q5_K;
}

// Where the parts of one quantised row of K elements sit in scratch (64-byte aligned parts).
struct RowLayout {
  RowLayout(int64_t depth, int64_t block);
  int64_t depth = 0, block = 0;
  int64_t d_offset = 0, sums_offset = 0, sums16_offset = 0, scaled_sums_offset = 0, row_bytes = 0;
};

// A quantised activation row: q[K] (padded to 64 bytes), d[K / block], sums[K / 32],
// sums16[K / 16] and scaled_sums[K / 32] (each 32-sum times its block's d).
struct QRow {
  const int8_t* q;
  const float* d;
  const int32_t* sums;
  const int32_t* sums16;
  const float* scaled_sums;
};

inline QRow qrow(const std::byte* base, const RowLayout& layout) {
  return QRow{reinterpret_cast<const int8_t*>(base),
              reinterpret_cast<const float*>(base + layout.d_offset),
              reinterpret_cast<const int32_t*>(base + layout.sums_offset),
              reinterpret_cast<const int32_t*>(base + layout.sums16_offset),
              reinterpret_cast<const float*>(base + layout.scaled_sums_offset)};
}

// Weight panels. A panel holds 16 rows; per weight block a scale part and an integer part
// (stored in quads, below; every 64-byte integer vector is aligned).
// Integer part of one block (byte 4r + i of a 64-byte vector belongs to row r):
//   Q8_0 512: vector t: w(element 4t + i) + 128
//   Q4_0, Q4_1 256: 4 nibble vectors
//   Q5_0, Q5_1 320: 4 nibble vectors | 8 x 8 bytes: bit 4r + i of part t = bit 4 of element 4t + i
//   Q4_K 2048: 32 nibble vectors
//   Q5_K 2560: per 32 elements s (at 320 s), as one Q5_0 block: 4 nibble vectors | 8 x 8 bytes
//        of fifth bits
//   Q6_K 3072: per 16 elements h (at 192 h): the vector of their high 2 bits (byte 4r + i, bits
//        2m, 2m + 1: element 16h + 4m + i) | nibble vectors 2h, 2h + 1 (low 4 bits)
// Nibble vector c: element 8c + i in the low nibble, 8c + 4 + i in the high one. The parts a
// block's decode reads together sit together (nibble_vector_at, bit4_part_at): Q6_K's in the
// order it reads them, Q5_K's within one 320-byte sub-block (its fifth bits after the four
// nibble vectors they complete, read between them).
// Scale part: Q8_0, Q4_0, Q5_0 32: d[16] f16 | Q4_1, Q5_1 64: d[16] m[16] | Q4_K, Q5_K 320:
//   d[16] dmin[16] scale[8][16] u8 min[8][16] u8 | Q6_K 288: d[16] scale[16][16] i8.
// Rows past the matrix are zero.
constexpr int64_t kPanelRows = 16;
constexpr int64_t panel_int_bytes(DType dtype) {
  switch (dtype) {
    case DType::Q8_0: return 512;
    case DType::Q4_0: return 256;
    case DType::Q4_1: return 256;
    case DType::Q5_0: return 320;
    case DType::Q5_1: return 320;
    case DType::Q4_K: return 2048;
    case DType::Q5_K: return 2560;
    case DType::Q6_K: return 3072;
    default: return 0;
  }
}
constexpr int64_t panel_scale_bytes(DType dtype) {
  switch (dtype) {
    case DType::Q8_0: return 32;
    case DType::Q4_0: return 32;
    case DType::Q4_1: return 64;
    case DType::Q5_0: return 32;
    case DType::Q5_1: return 64;
    case DType::Q4_K: return 320;
    case DType::Q5_K: return 320;
    case DType::Q6_K: return 288;
    default: return 0;
  }
}
// Byte offset of nibble vector c in a block's integer part.
constexpr int64_t nibble_vector_at(DType dtype, int64_t c) {
  if (dtype == DType::Q5_K) return 320 * (c / 4) + 64 * (c % 4);
  if (dtype == DType::Q6_K) return 192 * (c / 2) + 64 + 64 * (c % 2);
  return 64 * c;
}
// Byte offset of fifth-bit part t (8 bytes: bit 4r + i = bit 4 of element 4t + i of row r) in a
// block's integer part (Q5_0, Q5_1, Q5_K).
constexpr int64_t bit4_part_at(DType dtype, int64_t t) {
  if (dtype == DType::Q5_K) return 320 * (t / 8) + 256 + 8 * (t % 8);
  return 256 + 8 * t;
}
// Byte offset of Q6_K's high-bits vector h.
constexpr int64_t high_vector_at(int64_t h) { return 192 * h; }

// Quads. Panels are stored four at a time (the matrix's last quad may hold
// fewer): quad q holds its panels block by block, block b of all of them together, first their
// scale parts side by side (padded to 64 bytes), then their integer parts side by side. Decode
// runs four panels at once (independent chains) and reads a four-panel quad as one sequential
// stream, its lines in address order (linear_q8_simd.inc): a plain read loop over four
// separate panel streams reaches ~22 GB/s on this machine where one stream reaches ~30. One-row
// decode of the 32-element types and Q4_K streams at 80-100% of a plain read of the same bytes
// (kernels_bench). Q5_K's and Q6_K's extra bits sit beside the nibbles they complete, so their
// blocks are read in address order too (with those bits after all of a panel's nibbles, as
// four-panel quads they streamed at ~30% of a plain read, as one-panel quads prefetched 64 KiB
// ahead at 55-75%).
constexpr int64_t kQuadPanels = 4;  // the most panels a quad holds, and panels per decode call
constexpr int64_t quad_scale_area(DType dtype, int64_t panels) {
  return (panels * panel_scale_bytes(dtype) + 63) / 64 * 64;
}
constexpr int64_t quad_block_stride(DType dtype, int64_t panels) {
  return quad_scale_area(dtype, panels) + panels * panel_int_bytes(dtype);
}
// Bytes of a quad of `panels` panels of K elements (0 when the dtype has no panels).
int64_t quad_bytes(DType dtype, int64_t panels, int64_t k);
// Where the block b of panel g of a quad sits: scales at base + b * block_stride +
// g * panel_scale_bytes, integers at base + b * block_stride + ints_at + g * panel_int_bytes.
struct Quad {
  const uint8_t* base = nullptr;
  int64_t block_stride = 0, ints_at = 0;
};
inline Quad quad_view(DType dtype, const uint8_t* base, int64_t panels) {
  return Quad{base, quad_block_stride(dtype, panels), quad_scale_area(dtype, panels)};
}
// Bytes of the quads of an N x K matrix.
int64_t packed_bytes(DType dtype, int64_t n, int64_t k);
// Packs `count` GGUF rows of K elements, `row_bytes` apart from `rows`, into lanes
// [first_lane, first_lane + count) of panel g of the quad of `panels` panels at `quad`, whose
// bytes start zeroed (other lanes and panels untouched).
void pack_panel(DType dtype, const uint8_t* rows, int64_t row_bytes, int64_t first_lane, int64_t count, int64_t k,
                uint8_t* quad, int64_t panels, int64_t g);
// Packs the whole N x K matrix (packed_bytes(dtype, n, k) bytes at dst): quad q at
// q * quad_bytes(dtype, kQuadPanels, k).
void pack_weight(DType dtype, const uint8_t* w, int64_t n, int64_t k, uint8_t* dst);

// The little-endian 16 bits at p (a block's f16 scale).
inline uint16_t u16_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

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

// AMX (Isa::Amx): calls of at least kAmxMinRows x rows run the integer sums on tiles: per panel
// its weights are first decoded to plain unsigned bytes in the 64-byte vectors above (Q8_0's
// integer part already is), then per 32-element block (K-quants: sub-block) and 8 x rows one
// tdpbsud (four in flight) makes the same exact integers as vpdpbusd, and the float sequence is
// the one above: AMX gives the same bits as the other paths. Its scratch (amx_work_bytes): the
// decoded panel (16 bytes per element of K), four int32 tiles and the tile configuration.
// Q6_K stays on the VNNI path there (amx_tiles): its 16-element sub-blocks made the tile path
// slower (K=1536, N=576, 128 rows: 1475 against 1158 us on a Sapphire-Rapids-class Xeon).
constexpr int64_t kAmxMinRows = 8;
constexpr bool amx_tiles(DType dtype) { return activation_block(dtype) != 0 && dtype != DType::Q6_K; }
constexpr int64_t amx_work_bytes(DType, int64_t k) { return 16 * k + 4 * 16 * 64 + 64; }
// Calls that ran on the tiles so far on this thread (tests).
int64_t amx_tile_calls();

// The kernel for weights of `dtype` (activation_block(dtype) != 0) on `isa`.
KernelFn kernel(DType dtype, Isa isa);
// The same kernels with 24-bit activations (LinearPath::Int24): per activation block, X =
// round(x * (kDigitRange / amax)), |X| <= kDigitRange, written as X = 65025 h + 255 m + l with
// digits h, m, l in [-127, 127] (base 255: the AVX2 path's byte products need |x| <= 127, as the
// int8 path's rows have). Each digit is a quantised row (high, middle, low; their d are 65025 s,
// 255 s and s, s = amax / kDigitRange), and the weights' integer sums S_b run against all three
// at once (one decode of the weights): per output element and block b, with the digit rows'
// exact integers S_h, S_m, S_l (the K-quants' scaled totals),
//   acc  = fma(fma(float(S_h), 65025, fma(float(S_m), 255, float(S_l))), d_w(b) * s(b), acc)
//   Q4_1, Q5_1: macc = fma(m_w(b), s(b) * float(sum X in b), macc)     (the low row's scaled sums)
//   Q4_K, Q5_K: macc = fma(M_b, -dmin_w(b) * s(b), macc), M_b = sum_s fma-accumulated
//               float(min_s) * float(sum X in s)                         (the high row's scaled sums)
//   out = acc (+ macc)
// (sum X of 32 elements is exact in int32.) quantize_digits and its vector twin give the same
// bytes and every ISA the same operations, so all paths give the same bits, as the int8 path's
// do. AMX runs the VNNI path's digit tiles (amx_path takes int8 rows).
constexpr int64_t kDigitRange = 127 * 65025 + 127 * 255 + 127;
KernelFn digits_kernel(DType dtype, Isa isa);
void quantize_digits(const float* x, int64_t step, const RowLayout& layout, std::byte* const dst[3]);
// The group twin (GroupKernelFn) of kernel() or digits_kernel() of any dtype and instruction set;
// nullptr for any other kernel. Its members share x rows (each chunk is quantised once) and run
// their panels one after the other: a group of linears whose packed weights lie back to back
// streams them as one matrix. Each member's output is bitwise its own launch's.
GroupKernelFn group_kernel(KernelFn kernel);
// Scratch bytes of one call for weights of `dtype`, depth K and at most `rows` x rows (quantised
// rows: three per x row for digits_kernel).
int64_t scratch_bytes(DType dtype, int64_t depth, int64_t rows);

}  // namespace tessera::cpu::q8
