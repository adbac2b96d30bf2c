// The integer linear path (linear_q8.h): activation quantisation, the portable block sums, the
// 256-bit SIMD bodies (linear_q8_simd.inc, compiled for AVX2 and for AVX-512 VNNI) and the
// driver that quantises x rows in chunks and walks output tiles.
#include "kernels/cpu/linear_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/quant_avx2.h"
#include "kernels/cpu/quant_avx512.h"

namespace tessera::cpu::q8 {

namespace {

constexpr int64_t kTileRows = 4;    // x rows sharing each unpacked weight block
constexpr int64_t kItemCols = 16;   // output columns per work item
constexpr int64_t kRowItemCols = 64;  // the same when one x row is computed (no reuse across rows)
constexpr int64_t kChunkRows = 64;  // x rows quantised at a time (bounds the scratch)

int64_t align64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

using TileFn = void (*)(const uint8_t* const* w, const QRow* x, int64_t rows, int64_t cols, int64_t blocks,
                        float* results, int64_t results_stride);
using QuantizeFn = void (*)(const float* x, int64_t step, const RowLayout& layout, std::byte* dst);

}  // namespace

int64_t activation_block(DType dtype) {
  switch (dtype) {
    case DType::Q8_0:
    case DType::Q5_0:
    case DType::Q4_1:
      return 32;
    case DType::Q4_K:
    case DType::Q6_K:
      return 256;
    default:
      return 0;
  }
}

RowLayout::RowLayout(int64_t depth_, int64_t block_) : depth(depth_), block(block_) {
  d_offset = align64(depth);
  sums_offset = d_offset + align64(4 * (depth / block));
  scaled_sums_offset = sums_offset + align64(4 * (depth / 32));
  const int64_t pairs = (depth / block + 1) / 2;
  pair_scales_offset = scaled_sums_offset + align64(4 * (depth / 32));
  pair_offsets_offset = pair_scales_offset + align64(4 * 16 * pairs);
  row_bytes = pair_offsets_offset + (block == 32 ? align64(4 * 16 * pairs) : 0);
}

void quantize_row_portable(const float* x, int64_t step, const RowLayout& layout, std::byte* dst) {
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(dst + layout.d_offset);
  auto* sums = reinterpret_cast<int32_t*>(dst + layout.sums_offset);
  auto* scaled_sums = reinterpret_cast<float*>(dst + layout.scaled_sums_offset);
  for (int64_t k0 = 0; k0 < layout.depth; k0 += layout.block) {
    float a = 0.0f;
    for (int64_t k = k0; k < k0 + layout.block; ++k) a = std::max(a, std::fabs(x[k * step]));
    d[k0 / layout.block] = a / 127.0f;
    const float id = a != 0.0f ? 127.0f / a : 0.0f;
    for (int64_t k = k0; k < k0 + layout.block; k += 32) {
      int32_t total = 0;
      for (int64_t i = k; i < k + 32; ++i) {
        const float scaled = x[i * step] * id;
        const int v = static_cast<int>(std::nearbyint(scaled));
        q[i] = static_cast<int8_t>(v);
        total += v;
      }
      sums[k / 32] = total;
      scaled_sums[k / 32] = d[k0 / layout.block] * static_cast<float>(total);
    }
  }
}

// ---- portable: the same integers lane by lane, the same float sequence ----------------------

namespace {

// lanes[l] += scale(l) * sum_{i<4} w[4l+i] * x[4l+i] over one 32-element group; scale(l) is lo
// for lanes 0-3 and hi for lanes 4-7.
void group_sums(const int8_t* w, const int8_t* x, int lo, int hi, int32_t* lanes) {
  for (int l = 0; l < 8; ++l) {
    int32_t s = 0;
    for (int i = 0; i < 4; ++i) s += static_cast<int32_t>(w[4 * l + i]) * x[4 * l + i];
    lanes[l] += (l < 4 ? lo : hi) * s;
  }
}

struct PortableSums {
  int32_t lanes[8];
  float dd, mm, mv;
};

template <DType kType>
struct PortableBlock;

template <>
struct PortableBlock<DType::Q8_0> {
  static constexpr int64_t kBytes = 34;
  static constexpr bool kMin = false;
  static void sums(const uint8_t* w, int64_t b, const QRow& x, PortableSums& s) {
    std::fill_n(s.lanes, 8, 0);
    group_sums(reinterpret_cast<const int8_t*>(w + 2), x.q + 32 * b, 1, 1, s.lanes);
    s.dd = half_to_float(static_cast<uint16_t>(w[0] | (w[1] << 8))) * x.d[b];
  }
};

template <>
struct PortableBlock<DType::Q5_0> {
  static constexpr int64_t kBytes = 22;
  static constexpr bool kMin = false;
  static void sums(const uint8_t* w, int64_t b, const QRow& x, PortableSums& s) {
    uint32_t qh;
    std::memcpy(&qh, w + 2, 4);
    int8_t q[32];
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>(((w[6 + j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16);
      q[j + 16] = static_cast<int8_t>(((w[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
    }
    std::fill_n(s.lanes, 8, 0);
    group_sums(q, x.q + 32 * b, 1, 1, s.lanes);
    s.dd = half_to_float(static_cast<uint16_t>(w[0] | (w[1] << 8))) * x.d[b];
  }
};

template <>
struct PortableBlock<DType::Q4_1> {
  static constexpr int64_t kBytes = 20;
  static constexpr bool kMin = true;
  static void sums(const uint8_t* w, int64_t b, const QRow& x, PortableSums& s) {
    int8_t q[32];
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>(w[4 + j] & 0x0F);
      q[j + 16] = static_cast<int8_t>(w[4 + j] >> 4);
    }
    std::fill_n(s.lanes, 8, 0);
    group_sums(q, x.q + 32 * b, 1, 1, s.lanes);
    s.dd = half_to_float(static_cast<uint16_t>(w[0] | (w[1] << 8))) * x.d[b];
    s.mm = half_to_float(static_cast<uint16_t>(w[2] | (w[3] << 8)));
    s.mv = x.scaled_sums[b];
  }
};

template <>
struct PortableBlock<DType::Q4_K> {
  static constexpr int64_t kBytes = 144;
  static constexpr bool kMin = true;
  static void sums(const uint8_t* w, int64_t b, const QRow& x, PortableSums& s) {
    int scale[8], min[8];
    k_scale_min(w + 4, scale, min);
    std::fill_n(s.lanes, 8, 0);
    for (int sub = 0; sub < 8; ++sub) {
      const uint8_t* chunk = w + 16 + 32 * (sub / 2);
      int8_t q[32];
      for (int l = 0; l < 32; ++l) q[l] = static_cast<int8_t>((chunk[l] >> (4 * (sub % 2))) & 0x0F);
      group_sums(q, x.q + 256 * b + 32 * sub, scale[sub], scale[sub], s.lanes);
    }
    int32_t m = 0;
    for (int sub = 0; sub < 8; ++sub) m += min[sub] * x.sums[8 * b + sub];
    s.mv = static_cast<float>(m);
    s.dd = half_to_float(static_cast<uint16_t>(w[0] | (w[1] << 8))) * x.d[b];
    s.mm = -(half_to_float(static_cast<uint16_t>(w[2] | (w[3] << 8))) * x.d[b]);
  }
};

template <>
struct PortableBlock<DType::Q6_K> {
  static constexpr int64_t kBytes = 210;
  static constexpr bool kMin = false;
  static void sums(const uint8_t* w, int64_t b, const QRow& x, PortableSums& s) {
    const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
    std::fill_n(s.lanes, 8, 0);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = w + 64 * half;
      const uint8_t* qh = w + 128 + 32 * half;
      int8_t q[4][32];
      for (int l = 0; l < 32; ++l) {
        q[0][l] = static_cast<int8_t>(((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32);
        q[1][l] = static_cast<int8_t>(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
        q[2][l] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        q[3][l] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
      for (int k = 0; k < 4; ++k) {
        const int group = 4 * half + k;
        group_sums(q[k], x.q + 256 * b + 32 * group, scales[2 * group], scales[2 * group + 1], s.lanes);
      }
    }
    s.dd = half_to_float(static_cast<uint16_t>(w[208] | (w[209] << 8))) * x.d[b];
  }
};

float reduce_lanes(const float* a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

template <DType kType>
void tile_portable(const uint8_t* const* w, const QRow* x, int64_t rows, int64_t cols, int64_t blocks,
                   float* results, int64_t results_stride) {
  using B = PortableBlock<kType>;
  PortableSums s;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      float acc[2][8] = {}, macc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        B::sums(w[j] + b * B::kBytes, b, x[r], s);
        for (int l = 0; l < 8; ++l) acc[b % 2][l] = std::fma(static_cast<float>(s.lanes[l]), s.dd, acc[b % 2][l]);
        if constexpr (B::kMin) macc = std::fma(s.mm, s.mv, macc);
      }
      float lanes[8];
      for (int l = 0; l < 8; ++l) lanes[l] = acc[0][l] + acc[1][l];
      float v = reduce_lanes(lanes);
      if constexpr (B::kMin) v = v + macc;
      results[r * results_stride + j] = v;
    }
}

}  // namespace
}  // namespace tessera::cpu::q8

// ---- SIMD: one body, two dot products ---------------------------------------------------------

#if TESSERA_HAVE_AVX2_PATHS

TESSERA_AVX2_BEGIN
namespace tessera::cpu::q8::avx2_path {
namespace {
TESSERA_INLINE __m256i dot(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
TESSERA_INLINE __m256i dot_scaled(__m256i u, __m256i s, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}
constexpr int kWideCols = 1;  // 16 registers: 4 rows x 2 parities already use 8
#include "kernels/cpu/linear_q8_simd.inc"
}  // namespace
}  // namespace tessera::cpu::q8::avx2_path
TESSERA_AVX2_END

#if defined(__clang__)
#define TESSERA_VNNI_BEGIN \
  TESSERA_CLANG_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#define TESSERA_VNNI_END _Pragma("clang attribute pop")
#else
#define TESSERA_VNNI_BEGIN                                                                   \
  _Pragma("GCC push_options")                                                                \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c\")") \
          _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define TESSERA_VNNI_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#endif

TESSERA_VNNI_BEGIN
namespace tessera::cpu::q8::vnni_path {
namespace {
TESSERA_INLINE __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
// Scaled sums as on AVX2 (vpmaddwd multiplies and pairs in one step; vpmulld is slower).
TESSERA_INLINE __m256i dot_scaled(__m256i u, __m256i s, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}
constexpr int kWideCols = 2;  // 32 registers with AVX-512 VL
#include "kernels/cpu/linear_q8_simd.inc"
#include "kernels/cpu/linear_q8_row512.inc"
}  // namespace
}  // namespace tessera::cpu::q8::vnni_path
TESSERA_VNNI_END

#endif  // TESSERA_HAVE_AVX2_PATHS

// ---- driver -----------------------------------------------------------------------------------

namespace tessera::cpu::q8 {
namespace {

template <DType kType, TileFn kTile, QuantizeFn kQuantize>
absl::Status linear_q8(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const KernelInput& x = args.inputs[0];
  const KernelInput& w = args.inputs[1];
  const BoxRows rows(box);
  const int last = args.node.rank() - 1;
  const int64_t depth = w.shape[1];
  const int64_t n_begin = box.begin(last), n_end = box.end(last);
  const auto* weights = static_cast<const uint8_t*>(w.data);
  const int64_t weight_origin = w.extent.begin(0);  // constants: the whole matrix
  const int64_t row_bytes = dtype_bytes(kType, depth);
  const int64_t blocks = depth / dtype_block_size(kType);
  const RowLayout layout(depth, activation_block(kType));
  std::byte* quantised = ScratchCarver(args.scratch).take<std::byte>(std::min(kChunkRows, rows.count()) * layout.row_bytes);
  if (quantised == nullptr) return absl::InternalError("[linear] kernel scratch too small for quantised rows");
  const int64_t x_step = x.strides[last];
  const TensorView& out = args.out;
  const int64_t out_step = out.strides[last];
  int64_t index[kMaxRank];
  float results[kTileRows][kRowItemCols];
  QRow q[kTileRows];
  const uint8_t* w_rows[kRowItemCols];
  for (int64_t c0 = 0; c0 < rows.count(); c0 += kChunkRows) {
    const int64_t chunk = std::min(kChunkRows, rows.count() - c0);
    for (int64_t r = 0; r < chunk; ++r) {
      rows.index(c0 + r, index);
      index[last] = 0;
      kQuantize(x.at<const float>(index), x_step, layout, quantised + r * layout.row_bytes);
    }
    // Item i covers row tile i % row_tiles of column group i / row_tiles, so consecutive items
    // reuse the same weight rows from cache. A single row has nothing to reuse: wider items, and
    // results go straight to a dense output row. (Items only group work: no value depends on them.)
    const int64_t row_tiles = (chunk + kTileRows - 1) / kTileRows;
    const int64_t item_cols = chunk == 1 ? kRowItemCols : kItemCols;
    const int64_t col_items = (n_end - n_begin + item_cols - 1) / item_cols;
    for (int64_t item = 0; item < row_tiles * col_items; ++item) {
      const int64_t r0 = (item % row_tiles) * kTileRows;
      const int64_t tile_rows = std::min(kTileRows, chunk - r0);
      const int64_t n0 = n_begin + (item / row_tiles) * item_cols;
      const int64_t cols = std::min(item_cols, n_end - n0);
      for (int64_t r = 0; r < tile_rows; ++r) q[r] = qrow(quantised + (r0 + r) * layout.row_bytes, layout);
      for (int64_t j = 0; j < cols; ++j) w_rows[j] = weights + (n0 + j - weight_origin) * row_bytes;
      if (tile_rows == 1 && out_step == 1) {
        rows.index(c0 + r0, index);
        index[last] = n0;
        kTile(w_rows, q, 1, cols, blocks, out.at<float>(index), kRowItemCols);
        continue;
      }
      kTile(w_rows, q, tile_rows, cols, blocks, &results[0][0], kRowItemCols);
      for (int64_t r = 0; r < tile_rows; ++r) {
        rows.index(c0 + r0 + r, index);
        index[last] = n0;
        float* o = out.at<float>(index);
        for (int64_t j = 0; j < cols; ++j) o[j * out_step] = results[r][j];
      }
    }
  }
  return absl::OkStatus();
}

template <DType kType>
KernelFn kernel_for(Isa isa) {
#if TESSERA_HAVE_AVX2_PATHS
  if (isa == Isa::Avx512Vnni)
    return linear_q8<kType, vnni_path::tile_vnni<kType>, vnni_path::quantize_row_vnni<kType>>;
  if (isa != Isa::Portable) return linear_q8<kType, avx2_path::tile<kType>, avx2_path::quantize_row>;
#endif
  (void)isa;
  return linear_q8<kType, tile_portable<kType>, quantize_row_portable>;
}

}  // namespace

KernelFn kernel(DType dtype, Isa isa) {
  switch (dtype) {
    case DType::Q8_0:
      return kernel_for<DType::Q8_0>(isa);
    case DType::Q5_0:
      return kernel_for<DType::Q5_0>(isa);
    case DType::Q4_1:
      return kernel_for<DType::Q4_1>(isa);
    case DType::Q4_K:
      return kernel_for<DType::Q4_K>(isa);
    case DType::Q6_K:
      return kernel_for<DType::Q6_K>(isa);
    default:
      return nullptr;
  }
}

int64_t scratch_bytes(DType dtype, int64_t depth, int64_t rows) {
  const int64_t block = activation_block(dtype);
  if (block == 0 || depth % block != 0) return 0;
  return scratch_take_bytes<std::byte>(std::min(kChunkRows, rows) * RowLayout(depth, block).row_bytes);
}

}  // namespace tessera::cpu::q8
