// Optimised linear: out[..., n] = sum_k x[..., k] * w[n, k] for f32 x and weights in f32, f16,
// bf16 or a block-quantised dtype, dequantised block by block inside the dot product (never a
// dequantised copy of the matrix).
//
// Exactness (DESIGN.md section 1): element (row, n) is always computed the same way: L float
// partial sums (lane l takes k = l mod L; L = 8 for AVX2 and portable, 16 for AVX-512),
// acc = fma(x[k..k+L), w[n][k..k+L), acc) for k = 0, L, 2L, ... in increasing order (a partial
// last vector is zero-padded), then one fixed horizontal reduction (avx2::hsum, avx512::hsum). A
// decoded weight block is a pure function of its bytes (quant_avx2.h, quant_avx512.h). Work is split into tiles of up to 4 rows x a few columns,
// and items of 16 columns x 4 rows run in order (the backend's team splits the box among its
// workers); a tile only decides which elements share a decoded block, K is never split, so
// neither the box nor the thread count can change a value. The portable path keeps the same structure with scalar lanes (multiply then add);
// the instruction set is fixed per process.
//
// Scratch: when x is not contiguous along K (never the case for session buffers) its rows are
// copied into 4 * K floats of the call's scratch.

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/linear_q8.h"
#include "kernels/cpu/quant_avx2.h"
#include "kernels/cpu/quant_avx512.h"
#include "kernels/huge_pages.h"
#include "kernels/quant.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kTileRows = 4;           // x rows sharing each decoded weight block
constexpr int64_t kItemCols = 16;          // output columns per work item

// The geometry of one call, shared (read-only) by the work items.
struct LinearJob {
  const KernelArgs* args = nullptr;
  const BoxRows* rows = nullptr;
  int last = 0;
  int64_t depth = 0;  // K
  int64_t n_begin = 0, n_end = 0;
  const uint8_t* weights = nullptr;  // row n at weights + (n - weight_origin) * row_bytes
  int64_t weight_origin = 0, row_bytes = 0;
  int64_t row_tiles = 0, col_items = 0;
  bool x_contiguous = true;

  const uint8_t* weight_row(int64_t n) const { return weights + (n - weight_origin) * row_bytes; }
};

using Results = float[kTileRows][kItemCols];
// Computes results[r][j] for x rows x[0, rows) and weight rows n0 .. n0 + cols.
using TileFn = void (*)(const LinearJob& job, const float* const* x, int64_t rows, int64_t n0,
                        int64_t cols, Results& results);

// Pointer to the K elements of x row r; non-contiguous rows are copied into `scratch`.
const float* x_row(const LinearJob& job, int64_t r, float* scratch) {
  int64_t index[kMaxRank];
  job.rows->index(r, index);
  index[job.last] = 0;
  const TensorView& x = job.args->inputs[0];
  const float* p = x.at<const float>(index);
  if (job.x_contiguous) return p;
  const int64_t step = x.strides[job.last];
  for (int64_t k = 0; k < job.depth; ++k) scratch[k] = p[k * step];
  return scratch;
}

void store_tile(const LinearJob& job, int64_t r0, int64_t rows, int64_t n0, int64_t cols,
                const Results& results) {
  const TensorView& out = job.args->out;
  const int64_t step = out.strides[job.last];
  int64_t index[kMaxRank];
  for (int64_t r = 0; r < rows; ++r) {
    job.rows->index(r0 + r, index);
    index[job.last] = n0;
    float* o = out.at<float>(index);
    for (int64_t j = 0; j < cols; ++j) o[j * step] = results[r][j];
  }
}

// Item i covers row tile i % row_tiles of column group i / row_tiles, so consecutive items
// reuse the same weight rows from cache.
void run_items(const LinearJob& job, TileFn tile, float* scratch, int64_t begin, int64_t end) {
  const float* x[kTileRows];
  Results results;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t r0 = (item % job.row_tiles) * kTileRows;
    const int64_t rows = std::min(kTileRows, job.rows->count() - r0);
    const int64_t n0 = job.n_begin + (item / job.row_tiles) * kItemCols;
    const int64_t cols = std::min(kItemCols, job.n_end - n0);
    for (int64_t r = 0; r < rows; ++r) x[r] = x_row(job, r0 + r, job.x_contiguous ? nullptr : scratch + r * job.depth);
    tile(job, x, rows, n0, cols, results);
    store_tile(job, r0, rows, n0, cols, results);
  }
}

template <TileFn kTile>
absl::Status linear_f32(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const KernelInput& w = args.inputs[1];
  const BoxRows rows(box);
  LinearJob job;
  job.args = &args;
  job.rows = &rows;
  job.last = args.node.rank() - 1;
  job.depth = w.shape[1];
  job.n_begin = box.begin(job.last);
  job.n_end = box.end(job.last);
  job.weights = static_cast<const uint8_t*>(args.inputs[1].data);
  job.weight_origin = args.inputs[1].extent.begin(0);  // constants: the whole matrix
  job.row_bytes = dtype_bytes(w.dtype, job.depth);
  job.row_tiles = (rows.count() + kTileRows - 1) / kTileRows;
  job.col_items = (job.n_end - job.n_begin + kItemCols - 1) / kItemCols;
  job.x_contiguous = args.inputs[0].strides[job.last] == 1 || job.depth <= 1;
  float* scratch = nullptr;
  if (!job.x_contiguous) {
    scratch = ScratchCarver(args.scratch).take<float>(kTileRows * job.depth);
    if (scratch == nullptr) return absl::InternalError("[linear] kernel scratch too small for a strided x");
  }
  run_items(job, kTile, scratch, 0, job.row_tiles * job.col_items);
  return absl::OkStatus();
}

// ---- portable ---------------------------------------------------------------------------------

constexpr int64_t kPortableChunk = 256;  // elements dequantised at a time (whole blocks)

float reduce_lanes(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// Scalar twin of the AVX2 tile: eight lanes, k in increasing order, multiply then add.
void tile_portable(const LinearJob& job, const float* const* x, int64_t rows, int64_t n0,
                   int64_t cols, Results& results) {
  const DType wtype = job.args->inputs[1].dtype;
  float w[kPortableChunk];
  for (int64_t j = 0; j < cols; ++j) {
    const uint8_t* row = job.weight_row(n0 + j);
    float acc[kTileRows][8] = {};
    for (int64_t k0 = 0; k0 < job.depth; k0 += kPortableChunk) {
      const int64_t count = std::min(kPortableChunk, job.depth - k0);
      quant::dequantize_row(wtype, row + dtype_bytes(wtype, k0), w, count);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < count; ++k) {
          const float product = x[r][k0 + k] * w[k];
          acc[r][(k0 + k) % 8] = acc[r][(k0 + k) % 8] + product;
        }
    }
    for (int64_t r = 0; r < rows; ++r) results[r][j] = reduce_lanes(acc[r]);
  }
}

// ---- AVX2 -------------------------------------------------------------------------------------

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN

// A kRows x kCols tile over the whole of K: each weight block is decoded once for all rows.
template <class Dec, int kRows, int kCols>
void tile_avx2_fixed(const LinearJob& job, const float* const* x, int64_t n0, float* results,
                     int64_t results_stride) {
  __m256 acc[kRows][kCols];
  const uint8_t* w[kCols];
#pragma GCC unroll 8
  for (int j = 0; j < kCols; ++j) {
    w[j] = job.weight_row(n0 + j);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) acc[r][j] = _mm256_setzero_ps();
  }
  const int64_t blocks = job.depth / Dec::kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t k0 = b * Dec::kBlock;
#pragma GCC unroll 8
    for (int j = 0; j < kCols; ++j)
      Dec::decode(w[j] + b * Dec::kBytes, [&](int group, const __m256* v) {
        const int64_t k = k0 + 32 * group;
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          const float* xr = x[r] + k;
          __m256 a = acc[r][j];
          a = _mm256_fmadd_ps(_mm256_loadu_ps(xr), v[0], a);
          a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), v[1], a);
          a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 16), v[2], a);
          a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 24), v[3], a);
          acc[r][j] = a;
        }
      });
  }
  if constexpr (Dec::kDense) {  // K % 32 tail of a float matrix, 8 lanes at a time
    for (int64_t k = blocks * Dec::kBlock; k < job.depth; k += 8) {
      const __m256i mask = avx2::tail_mask(std::min<int64_t>(8, job.depth - k));
#pragma GCC unroll 8
      for (int j = 0; j < kCols; ++j) {
        const __m256 v = Dec::partial(w[j], k, mask);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r)
          acc[r][j] = _mm256_fmadd_ps(_mm256_maskload_ps(x[r] + k, mask), v, acc[r][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < kCols; ++j) results[r * results_stride + j] = avx2::hsum(acc[r][j]);
}

template <class Dec, int kRows>
void tile_avx2_rows(const LinearJob& job, const float* const* x, int64_t n0, int64_t cols,
                    Results& results) {
  // One row streams the weights (decode): 4 columns give 4 independent FMA chains. Several rows
  // reuse each decoded block: 2 columns keep 8 accumulators in registers.
  constexpr int kCols = kRows == 1 ? 4 : 2;
  int64_t j = 0;
  for (; j + kCols <= cols; j += kCols)
    tile_avx2_fixed<Dec, kRows, kCols>(job, x, n0 + j, &results[0][j], kItemCols);
  for (; j < cols; ++j) tile_avx2_fixed<Dec, kRows, 1>(job, x, n0 + j, &results[0][j], kItemCols);
}

template <class Dec>
void tile_avx2(const LinearJob& job, const float* const* x, int64_t rows, int64_t n0, int64_t cols,
               Results& results) {
  switch (rows) {
    case 1:
      return tile_avx2_rows<Dec, 1>(job, x, n0, cols, results);
    case 2:
      return tile_avx2_rows<Dec, 2>(job, x, n0, cols, results);
    case 3:
      return tile_avx2_rows<Dec, 3>(job, x, n0, cols, results);
    default:
      return tile_avx2_rows<Dec, 4>(job, x, n0, cols, results);
  }
}

TESSERA_AVX2_END

// ---- AVX-512: the same structure with 16 lanes ----------------------------------------------

TESSERA_AVX512_BEGIN

template <class Dec, int kRows, int kCols>
void tile_avx512_fixed(const LinearJob& job, const float* const* x, int64_t n0, float* results,
                       int64_t results_stride) {
  __m512 acc[kRows][kCols];
  const uint8_t* w[kCols];
#pragma GCC unroll 8
  for (int j = 0; j < kCols; ++j) {
    w[j] = job.weight_row(n0 + j);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) acc[r][j] = _mm512_setzero_ps();
  }
  const int64_t blocks = job.depth / Dec::kBlock;
  auto accumulate = [&](int j, int64_t k0) {
    return [&acc, x, j, k0](int group, const __m512* v) {
      const int64_t k = k0 + 32 * group;
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        acc[r][j] = _mm512_fmadd_ps(_mm512_loadu_ps(x[r] + k), v[0], acc[r][j]);
        acc[r][j] = _mm512_fmadd_ps(_mm512_loadu_ps(x[r] + k + 16), v[1], acc[r][j]);
      }
    };
  };
  if constexpr (Dec::kScales > 0) {
    // Scales of 16 blocks per column at a time (gather_scales), then the blocks.
    alignas(64) float d[kCols][16], m[kCols][16];
    for (int64_t b0 = 0; b0 < blocks; b0 += 16) {
      const int64_t count = std::min<int64_t>(16, blocks - b0);
#pragma GCC unroll 8
      for (int j = 0; j < kCols; ++j)
        avx512::gather_scales<Dec>(w[j] + b0 * Dec::kBytes, count, d[j], m[j]);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t b = b0 + i;
#pragma GCC unroll 8
        for (int j = 0; j < kCols; ++j)
          Dec::decode_scaled(w[j] + b * Dec::kBytes, _mm512_set1_ps(d[j][i]),
                             _mm512_set1_ps(m[j][i]), accumulate(j, b * Dec::kBlock));
      }
    }
  } else {
    for (int64_t b = 0; b < blocks; ++b)
#pragma GCC unroll 8
      for (int j = 0; j < kCols; ++j)
        Dec::decode(w[j] + b * Dec::kBytes, accumulate(j, b * Dec::kBlock));
  }
  if constexpr (Dec::kDense) {  // K % 32 tail of a float matrix, 16 lanes at a time
    for (int64_t k = blocks * Dec::kBlock; k < job.depth; k += 16) {
      const __mmask16 mask =
          static_cast<__mmask16>((1u << std::min<int64_t>(16, job.depth - k)) - 1);
#pragma GCC unroll 8
      for (int j = 0; j < kCols; ++j) {
        const __m512 v = Dec::partial(w[j], k, mask);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r)
          acc[r][j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x[r] + k), v, acc[r][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < kCols; ++j) results[r * results_stride + j] = avx512::hsum(acc[r][j]);
}

template <class Dec, int kRows>
void tile_avx512_rows(const LinearJob& job, const float* const* x, int64_t n0, int64_t cols,
                      Results& results) {
  // 32 registers: 8 columns for one streaming row, 4 x 4 accumulators for several rows.
  constexpr int kCols = kRows == 1 ? 8 : 4;
  int64_t j = 0;
  for (; j + kCols <= cols; j += kCols)
    tile_avx512_fixed<Dec, kRows, kCols>(job, x, n0 + j, &results[0][j], kItemCols);
  for (; j + 2 <= cols; j += 2)
    tile_avx512_fixed<Dec, kRows, 2>(job, x, n0 + j, &results[0][j], kItemCols);
  for (; j < cols; ++j) tile_avx512_fixed<Dec, kRows, 1>(job, x, n0 + j, &results[0][j], kItemCols);
}

template <class Dec>
void tile_avx512(const LinearJob& job, const float* const* x, int64_t rows, int64_t n0,
                 int64_t cols, Results& results) {
  switch (rows) {
    case 1:
      return tile_avx512_rows<Dec, 1>(job, x, n0, cols, results);
    case 2:
      return tile_avx512_rows<Dec, 2>(job, x, n0, cols, results);
    case 3:
      return tile_avx512_rows<Dec, 3>(job, x, n0, cols, results);
    default:
      return tile_avx512_rows<Dec, 4>(job, x, n0, cols, results);
  }
}

TESSERA_AVX512_END
#endif  // TESSERA_HAVE_AVX2_PATHS

}  // namespace

// The larger of the two paths' needs (the bound holds whichever path a process chooses).
int64_t linear_scratch_bytes(const Graph& graph, const Node& node, bool dense_views) {
  if (node.inputs.size() < 2) return 0;
  const Node& w = graph.node(node.inputs[1]);
  if (w.shape.size() != 2) return 0;
  const int64_t rows = node.shape.empty() ? 1 : shape_volume(node.shape) / std::max<int64_t>(node.shape.back(), 1);
  const int64_t int8_path = q8::scratch_bytes(w.dtype, w.shape[1], 3 * rows);  // int24: three digit rows per row
  return std::max(int8_path, dense_views ? 0 : scratch_take_bytes<float>(kTileRows * w.shape[1]));
}

namespace {

// The constant weight of a linear node whose kernel is the int8 path, or nullptr.
const Node* packable_weight(const Graph& graph, const Node& node, KernelFn kernel) {
  if (node.kind != OpKind::Linear || node.inputs.size() < 2 || kernel == nullptr) return nullptr;
  const Node& w = graph.node(node.inputs[1]);
  if (w.kind != OpKind::Constant || w.shape.size() != 2 || q8::activation_block(w.dtype) == 0) return nullptr;
  for (Isa isa : {Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Amx})
    if (kernel == q8::kernel(w.dtype, isa) || kernel == q8::digits_kernel(w.dtype, isa)) return &w;
  return nullptr;
}

}  // namespace

GroupKernelFn group_kernel(KernelFn kernel) { return q8::group_kernel(kernel); }

int64_t linear_prepared_bytes(const Graph& graph, const Node& node, KernelFn kernel) {
  const Node* w = packable_weight(graph, node, kernel);
  return w == nullptr ? 0 : q8::packed_bytes(w->dtype, w->shape[0], w->shape[1]);
}

namespace {

// `bytes` of transparent-huge-page memory (decode streams a packed matrix once per token:
// DESIGN.md section 5), from chunks shared by the process's packed weights. nullptr when out of
// memory.
std::shared_ptr<void> huge_page_bytes(int64_t bytes) {
  static std::mutex mutex;
  static HugePageChunks* chunks = new HugePageChunks;  // never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  return chunks->take(bytes).data;
}

}  // namespace

std::shared_ptr<const void> linear_prepare_data(const Graph& graph, const Node& node, KernelFn kernel) {
  const Node* w = packable_weight(graph, node, kernel);
  if (w == nullptr) return nullptr;
  const int64_t bytes = q8::packed_bytes(w->dtype, w->shape[0], w->shape[1]);
  if (bytes <= 0) return nullptr;
  std::shared_ptr<void> memory = huge_page_bytes(bytes);
  if (memory == nullptr) return nullptr;  // the kernel packs panels itself
  q8::pack_weight(w->dtype, static_cast<const uint8_t*>(graph.constant_data(w->constant).data), w->shape[0],
                  w->shape[1], static_cast<uint8_t*>(memory.get()));
  return memory;
}

KernelFn linear_kernel(const Graph& graph, const Node& node, Isa isa) {
  return linear_kernel_with(graph, node, isa, linear_path());
}

KernelFn linear_kernel_with(const Graph& graph, const Node& node, Isa isa, LinearPath path) {
  const Node& x = graph.node(node.inputs[0]);
  const Node& w = graph.node(node.inputs[1]);
  if (node.dtype != DType::F32 || x.dtype != DType::F32) return nullptr;
  if (quant::block_dequantizer(w.dtype) == nullptr) return nullptr;
  if (w.shape[1] % dtype_block_size(w.dtype) != 0) return nullptr;  // whole blocks only
  const int64_t activation_block = q8::activation_block(w.dtype);
  if (path != LinearPath::F32 && activation_block != 0 && w.shape[1] % activation_block == 0)
    return path == LinearPath::Int8 ? q8::kernel(w.dtype, isa) : q8::digits_kernel(w.dtype, isa);
#if TESSERA_HAVE_AVX2_PATHS
  if (isa >= Isa::Avx512)
    return select_decoder<avx512::Decoder>(w.dtype, [](auto decoder) -> KernelFn {
      return linear_f32<tile_avx512<decltype(decoder)>>;
    });
  if (isa == Isa::Avx2)
    return select_decoder<avx2::Decoder>(
        w.dtype, [](auto decoder) -> KernelFn { return linear_f32<tile_avx2<decltype(decoder)>>; });
#endif
  (void)isa;
  return linear_f32<tile_portable>;
}

}  // namespace tessera::cpu
