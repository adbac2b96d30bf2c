// Optimised attention, f32 q and output, f32, f16 or bf16 keys and values (semantics at the
// definition block, engine/ops_attention.cc): causal
// or not, sliding window, softcap, GQA. The portable path runs one query row (leading, t, head)
// at a time. The AVX2 path runs a batch of consecutive rows with the same number of visible
// keys (the query heads of one position, up to 16) over the keys in blocks of 48: each block's
// keys (then values) are read once from memory, sequentially, for every row of the batch, and
// rows reading the same K/V head (up to 4) share each load. Decode streams K and V of every layer
// from memory, so reading them in order, once, is what sets its speed (an f16 K/V cache halves
// those bytes; its values convert to float exactly). Rows are run in order (the backend's team
// splits the box among its workers).
//
// Exactness (DESIGN.md section 1): a row's softmax depends only on the row: scores of its
// visible keys in increasing key order (each a dot product with eight float lanes over D and a
// fixed horizontal sum, scaled in float, softcapped with std::tanh), the max, p = exp(score -
// max) (one vectorised exp, tails padded), the sum of p with eight lanes from the row's first
// key, then out[j] = (sum_s fma(p_s, v[s][j])) / sum. Column j's chain is the same whichever
// columns the box holds, and keys and rows are grouped (for ILP, and to load K/V once) only
// across independent dot products and independent column chains; a column's partial sum waits
// in scratch between key blocks as a float, so blocking does not change it either.
// Reads stay inside the needed boxes: the row's visible keys, and only the box's V columns.
//
// Scratch (the call's): the scores of the longest row for each row of a batch and the batch's
// column sums, or, when a view is not contiguous along its last axis (never session buffers) or
// the path does not read its K/V dtype directly (bf16; f16 on the portable path), the scores and
// sums of one row plus float copies of its Q/K/V rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace tessera::cpu {

namespace {


// One query row's inputs, all contiguous along their last axis. k and v hold the job's K/V
// element type (float for copies).
struct AttentionRow {
  const float* q = nullptr;  // D values
  const void* k = nullptr;   // key `first`; key first + i at k + i * k_stride elements
  const void* v = nullptr;   // key `first`, the box's first column; v_stride between keys
  int64_t k_stride = 0, v_stride = 0;
  int64_t keys = 0;      // visible keys (last - first)
  int64_t dim = 0;       // D
  int64_t columns = 0;   // output columns (from the box's first)
  float* out = nullptr;  // the box's first column of this row
  int64_t out_step = 1;
  float scale = 1, softcap = 0;
  float* scores = nullptr;  // `keys` floats (+ 8 of padding)
};

constexpr int kMaxGroup = 4;   // rows sharing K/V whose dot products and sums share each load
constexpr int kMaxBatch = 16;  // rows with the same keys run over each key block together
constexpr int64_t kKeyBlock = 48;  // keys per block (a multiple of every group's key count)

// Floats of scratch per row of a batch: its scores, then its column sums.
int64_t scores_stride(int64_t longest) { return (longest + 8 + 15) / 16 * 16; }
int64_t sums_stride(int64_t columns) { return (columns + 15) / 16 * 16; }

// Rows run together over each key block: `count` rows with the same number of visible keys, in
// groups of consecutive rows that share their keys and values (group g is rows [starts[g],
// starts[g + 1])); each row's column sums (sums_stride floats apart) wait in `sums`.
struct RowBatch {
  const AttentionRow* rows = nullptr;
  int count = 0, groups = 0;
  int starts[kMaxBatch + 1] = {};
  float* sums = nullptr;
  int64_t sums_stride = 0;
  bool early_values = false;  // values are fetched during the scores (batch_rows)
};

float capped(float x, float softcap) {
  return softcap > 0 ? softcap * std::tanh(x / softcap) : x;
}

// ---- portable ---------------------------------------------------------------------------------

inline float as_float(float x) { return x; }
inline float as_float(uint16_t h) { return half_to_float(h); }  // f16, exact

template <class T>
float dot_portable(const float* a, const T* b, int64_t n) {
  float lanes[8] = {};
  for (int64_t i = 0; i < n; ++i) lanes[i % 8] = lanes[i % 8] + a[i] * as_float(b[i]);
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
         ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

// One row, K/V elements of type T (float, or uint16_t for f16).
template <class T>
void row_portable(const AttentionRow& r) {
  const T* k = static_cast<const T*>(r.k);
  const T* v = static_cast<const T*>(r.v);
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < r.keys; ++i) {
    const float x = capped(dot_portable(r.q, k + i * r.k_stride, r.dim) * r.scale, r.softcap);
    r.scores[i] = x;
    max = std::max(max, x);
  }
  float lanes[8] = {};
  for (int64_t i = 0; i < r.keys; ++i) {
    r.scores[i] = std::exp(r.scores[i] - max);
    lanes[i % 8] = lanes[i % 8] + r.scores[i];
  }
  const float sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
                    ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  for (int64_t j = 0; j < r.columns; ++j) {
    float acc = 0;
    for (int64_t i = 0; i < r.keys; ++i) acc = acc + r.scores[i] * as_float(v[i * r.v_stride + j]);
    r.out[j * r.out_step] = acc / sum;
  }
}

// ---- AVX2 -------------------------------------------------------------------------------------

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN

// Eight K/V elements as floats (f16 converts exactly), and the first n < 8 of them with zeros
// after (reading only those n).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_first(const float* p, int64_t n) { return _mm256_maskload_ps(p, avx2::tail_mask(n)); }
inline __m256 load_first(const uint16_t* p, int64_t n) {
  alignas(16) uint16_t h[8] = {};
  std::memcpy(h, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}
template <class T>
__m256 load_n(const T* p, int64_t n) {
  return n >= 8 ? load8(p) : load_first(p, n);
}

// Dot products of kHeads query rows that share their keys with kCount keys from key i0, each key
// loaded once for all heads: per (head, key) an 8-lane fma chain over D and a fixed horizontal
// sum, whatever the grouping.
template <class T, int kHeads, int kCount>
void group_dots_avx2(const AttentionRow* rows, int64_t i0, float* const* out) {
  const int64_t k_stride = rows[0].k_stride, dim = rows[0].dim;
  const T* k = static_cast<const T*>(rows[0].k) + i0 * k_stride;
  __m256 acc[kHeads][kCount];
#pragma GCC unroll 4
  for (int h = 0; h < kHeads; ++h)
#pragma GCC unroll 4
    for (int i = 0; i < kCount; ++i) acc[h][i] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8) {
    __m256 kv[kCount];
#pragma GCC unroll 4
    for (int i = 0; i < kCount; ++i) kv[i] = load8(k + i * k_stride + d);
#pragma GCC unroll 4
    for (int h = 0; h < kHeads; ++h) {
      const __m256 qv = _mm256_loadu_ps(rows[h].q + d);
#pragma GCC unroll 4
      for (int i = 0; i < kCount; ++i) acc[h][i] = _mm256_fmadd_ps(qv, kv[i], acc[h][i]);
    }
  }
  if (d < dim) {
    const __m256i mask = avx2::tail_mask(dim - d);
    __m256 kv[kCount];
#pragma GCC unroll 4
    for (int i = 0; i < kCount; ++i) kv[i] = load_first(k + i * k_stride + d, dim - d);
#pragma GCC unroll 4
    for (int h = 0; h < kHeads; ++h) {
      const __m256 qv = _mm256_maskload_ps(rows[h].q + d, mask);
#pragma GCC unroll 4
      for (int i = 0; i < kCount; ++i) acc[h][i] = _mm256_fmadd_ps(qv, kv[i], acc[h][i]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < kHeads; ++h)
#pragma GCC unroll 4
    for (int i = 0; i < kCount; ++i) out[h][i0 + i] = avx2::hsum(acc[h][i]);
}

// Keys per group_dots_avx2 call for kHeads rows: accumulators, keys and q fit 16 registers.
// Each divides kKeyBlock.
template <int kHeads>
constexpr int kGroupKeys = kHeads == 1 ? 6 : kHeads == 2 ? 4 : 3;

// Raw scores (before scale) of keys [i0, i1) for kHeads rows sharing their keys, into each row's
// scores; fetches the same lines of the next key block into L2 meanwhile (a prefetch never
// faults; into L1 it would evict the block in use).
template <class T, int kHeads>
void group_scores_avx2(const AttentionRow* rows, int64_t i0, int64_t i1) {
  constexpr int kCount = kGroupKeys<kHeads>;
  float* out[kHeads];
  for (int h = 0; h < kHeads; ++h) out[h] = rows[h].scores;
  const int64_t row_bytes = rows[0].dim * static_cast<int64_t>(sizeof(T));
  const char* k = static_cast<const char*>(rows[0].k);
  const int64_t stride_bytes = rows[0].k_stride * static_cast<int64_t>(sizeof(T));
  int64_t i = i0;
  for (; i + kCount <= i1; i += kCount) {
    for (int j = 0; j < kCount; ++j)
      for (int64_t o = 0; o < row_bytes; o += 64)
        _mm_prefetch(k + (i + kKeyBlock + j) * stride_bytes + o, _MM_HINT_T1);
    group_dots_avx2<T, kHeads, kCount>(rows, i, out);
  }
  for (; i < i1; ++i) group_dots_avx2<T, kHeads, 1>(rows, i, out);
}

// After the raw scores: scale and softcap, p = exp(score - max) in place; returns sum(p).
float softmax_avx2(const AttentionRow& r) {
  int64_t i = 0;
  float max = -std::numeric_limits<float>::infinity();
  if (r.softcap == 0) {
    // Scaled in place 8 at a time (the same products); a lane keeps its max as std::max would
    // (a NaN score never replaces it), and max is exact in any order.
    const __m256 scale = _mm256_set1_ps(r.scale);
    __m256 lanes = _mm256_set1_ps(max);
    for (; i + 8 <= r.keys; i += 8) {
      const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(r.scores + i), scale);
      _mm256_storeu_ps(r.scores + i, x);
      lanes = _mm256_max_ps(x, lanes);
    }
    alignas(32) float lane[8];
    _mm256_store_ps(lane, lanes);
    for (float x : lane) max = std::max(max, x);
  }
  for (; i < r.keys; ++i) {
    r.scores[i] = capped(r.scores[i] * r.scale, r.softcap);
    max = std::max(max, r.scores[i]);
  }
  // p = exp(score - max) in place; the padded tail vector runs the same exp (masked loads and
  // stores only there: a masked store is slow on some cores).
  const __m256 m = _mm256_set1_ps(max);
  __m256 lanes = _mm256_setzero_ps();
  float* const scores = r.scores;
  const int64_t keys = r.keys;
  for (i = 0; i + 8 <= keys; i += 8) {
    const __m256 p = avx2::exp(_mm256_sub_ps(_mm256_loadu_ps(scores + i), m));
    _mm256_storeu_ps(scores + i, p);
    lanes = _mm256_add_ps(lanes, p);
  }
  if (i < keys) {
    const __m256i mask = avx2::tail_mask(keys - i);
    const __m256 p = avx2::exp(_mm256_sub_ps(_mm256_maskload_ps(scores + i, mask), m));
    _mm256_maskstore_ps(scores + i, mask, p);
    lanes = _mm256_add_ps(lanes, _mm256_and_ps(p, _mm256_castsi256_ps(mask)));
  }
  return avx2::hsum(lanes);
}

// Adds p_i * v_i over keys [i0, i1) to the column sums of kHeads rows sharing their values,
// 16 columns at a time, each V vector loaded once for all rows; row h's sums are at sums[h]
// (padded to 16 columns). A column's chain is fma over the keys in order, its partial sum kept
// as a float between blocks: the same bits however keys are blocked and columns chunked.
// Columns from j_begin (earlier ones are left alone).
template <class T, int kHeads>
void group_weighted_avx2(const AttentionRow* rows, float* const* sums, int64_t i0, int64_t i1,
                         int64_t j_begin = 0) {
  const AttentionRow& r0 = rows[0];
  const int64_t v_stride = r0.v_stride;
  for (int64_t j0 = j_begin; j0 < r0.columns; j0 += 16) {
    const int64_t columns = std::min<int64_t>(16, r0.columns - j0);
    const int64_t n0 = std::min<int64_t>(8, columns), n1 = std::max<int64_t>(0, columns - 8);
    __m256 acc[kHeads][2];
#pragma GCC unroll 4
    for (int h = 0; h < kHeads; ++h) {
      acc[h][0] = _mm256_loadu_ps(sums[h] + j0);
      acc[h][1] = _mm256_loadu_ps(sums[h] + j0 + 8);
    }
    const T* v = static_cast<const T*>(r0.v) + j0 + i0 * v_stride;
    for (int64_t i = i0; i < i1; ++i, v += v_stride) {
      _mm_prefetch(reinterpret_cast<const char*>(v + kKeyBlock * v_stride), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(v + kKeyBlock * v_stride + 15), _MM_HINT_T1);
      const __m256 v0 = load_n(v, n0), v1 = load_n(v + 8, n1);
#pragma GCC unroll 4
      for (int h = 0; h < kHeads; ++h) {
        const __m256 p = _mm256_set1_ps(rows[h].scores[i]);
        acc[h][0] = _mm256_fmadd_ps(p, v0, acc[h][0]);
        acc[h][1] = _mm256_fmadd_ps(p, v1, acc[h][1]);
      }
    }
#pragma GCC unroll 4
    for (int h = 0; h < kHeads; ++h) {
      _mm256_storeu_ps(sums[h] + j0, acc[h][0]);
      _mm256_storeu_ps(sums[h] + j0 + 8, acc[h][1]);
    }
  }
}

// One key block [i0, i1) of group g of a batch: its scores, or its values' sums, with the group
// functions of a path (Path::scores and Path::weighted for kHeads rows).
template <class T, int kHeads, class Path>
void group_block(const RowBatch& b, int g, bool scores, int64_t i0, int64_t i1) {
  const AttentionRow* rows = b.rows + b.starts[g];
  if (scores) return Path::template scores<T, kHeads>(rows, i0, i1, b);
  float* sums[kHeads];
  for (int h = 0; h < kHeads; ++h) sums[h] = b.sums + (b.starts[g] + h) * b.sums_stride;
  Path::template weighted<T, kHeads>(rows, sums, i0, i1);
}

template <class T, class Path>
void block(const RowBatch& b, int g, bool scores, int64_t i0, int64_t i1) {
  switch (b.starts[g + 1] - b.starts[g]) {
    case 1:
      return group_block<T, 1, Path>(b, g, scores, i0, i1);
    case 2:
      return group_block<T, 2, Path>(b, g, scores, i0, i1);
    case 3:
      return group_block<T, 3, Path>(b, g, scores, i0, i1);
    default:
      return group_block<T, 4, Path>(b, g, scores, i0, i1);
  }
}

struct Avx2Groups {
  template <class T, int kHeads>
  static void scores(const AttentionRow* rows, int64_t i0, int64_t i1, const RowBatch&) {
    group_scores_avx2<T, kHeads>(rows, i0, i1);
  }
  template <class T, int kHeads>
  static void weighted(const AttentionRow* rows, float* const* sums, int64_t i0, int64_t i1) {
    group_weighted_avx2<T, kHeads>(rows, sums, i0, i1);
  }
};

using BlockFn = void (*)(const RowBatch& b, int g, bool scores, int64_t i0, int64_t i1);

// Values fetched into L2 during the scores (by kBlock, with the next block's keys) when all of
// them take at most this many bytes; they then wait there for the weighted sums. Larger values
// are not: Gemma-3-270M's sliding-window layers (512 keys, 256 KiB of f16 values) took 44 us a
// call inside a decode step with them fetched early and 32 us without (eight prefetches per
// key on top of the keys' own crowd out the loads in flight); SmolLM2-135M at context 128
// (48 KiB) keeps them.
constexpr int64_t kEarlyValueBytes = 64 << 10;

// Raw scores of keys [i_begin, i_end) of every row of a batch, block by block from i_begin
// (each block's keys read once for every row, in memory order).
template <BlockFn kBlock>
void batch_scores(const RowBatch& b, int64_t i_begin, int64_t i_end) {
  for (int64_t i0 = i_begin; i0 < i_end; i0 += kKeyBlock)
    for (int g = 0; g < b.groups; ++g) kBlock(b, g, true, i0, std::min(i_end, i0 + kKeyBlock));
}

// After every raw score of a batch: each row's softmax, its column sums block by block the
// same way, and its outputs.
template <class T, BlockFn kBlock>
void batch_values(const RowBatch& b) {
  const int64_t keys = b.rows[0].keys;
  // The first block of values is fetched while the softmaxes run, group by group (key by key
  // across the groups was slower on one-row decode in kernels_bench).
  for (int g = 0; g < b.groups && !b.early_values; ++g) {
    const AttentionRow& r = b.rows[b.starts[g]];
    const int64_t row_bytes = r.columns * static_cast<int64_t>(sizeof(T));
    for (int64_t i = 0; i < std::min(keys, kKeyBlock); ++i)
      for (int64_t o = 0; o < row_bytes + 63; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(static_cast<const T*>(r.v) + i * r.v_stride) + o, _MM_HINT_T1);
  }
  float total[kMaxBatch];
  for (int r = 0; r < b.count; ++r) {
    total[r] = softmax_avx2(b.rows[r]);
    std::fill_n(b.sums + r * b.sums_stride, b.sums_stride, 0.0f);
  }
  for (int64_t i0 = 0; i0 < keys; i0 += kKeyBlock)
    for (int g = 0; g < b.groups; ++g) kBlock(b, g, false, i0, std::min(keys, i0 + kKeyBlock));
  for (int r = 0; r < b.count; ++r) {
    const AttentionRow& row = b.rows[r];
    const float* sums = b.sums + r * b.sums_stride;
    for (int64_t j = 0; j < row.columns; ++j) row.out[j * row.out_step] = sums[j] / total[r];
  }
}

// The rows of a batch (K/V elements of type T: float, or uint16_t for f16): their scores, then
// their values; kBlock runs one block of one group. kEarly: the first key block is fetched up
// front, and kBlock fetches values during the scores when they fit kEarlyValueBytes.
template <class T, BlockFn kBlock, bool kEarly = false>
void batch_rows(const RowBatch& batch) {
  RowBatch b = batch;
  const int64_t keys = b.rows[0].keys;
  b.early_values = kEarly && keys * b.groups * b.rows[0].columns * static_cast<int64_t>(sizeof(T)) <= kEarlyValueBytes;
  if (kEarly)  // the first block's keys (kBlock fetches each next one)
    for (int64_t i = 0; i < std::min(keys, kKeyBlock); ++i)
      for (int g = 0; g < b.groups; ++g) {
        const AttentionRow& r = b.rows[b.starts[g]];
        const char* k = static_cast<const char*>(r.k) + i * r.k_stride * static_cast<int64_t>(sizeof(T));
        for (int64_t o = 0; o < r.dim * static_cast<int64_t>(sizeof(T)); o += 64) _mm_prefetch(k + o, _MM_HINT_T1);
      }
  batch_scores<kBlock>(b, 0, keys);
  batch_values<T, kBlock>(b);
}

template <class T>
void batch_avx2(const RowBatch& b) {
  batch_rows<T, block<T, Avx2Groups>>(b);
}
// The two phases of batch_avx2 (AttentionPhases).
template <class T>
void scores_avx2(const RowBatch& b, int64_t i_begin, int64_t i_end) {
  batch_scores<block<T, Avx2Groups>>(b, i_begin, i_end);
}
template <class T>
void values_avx2(const RowBatch& b) {
  batch_values<T, block<T, Avx2Groups>>(b);
}

// One copied row (float K/V; its column sums follow its scores) as a batch of one.
void row_avx2(const AttentionRow& r) {
  RowBatch b;
  b.rows = &r;
  b.count = b.groups = 1;
  b.starts[1] = 1;
  b.sums = r.scores + scores_stride(r.keys);
  b.sums_stride = sums_stride(r.columns);
  batch_avx2<float>(b);
}

TESSERA_AVX2_END

#include "kernels/cpu/attention_avx512.inc"
#endif  // TESSERA_HAVE_AVX2_PATHS

// ---- driver -----------------------------------------------------------------------------------

using RowFn = void (*)(const AttentionRow&);
using BatchFn = void (*)(const RowBatch& batch);
// Raw scores of keys [i_begin, i_end) of a batch's rows (batch_scores).
using ScoresFn = void (*)(const RowBatch& b, int64_t i_begin, int64_t i_end);

struct AttentionJob {
  const KernelArgs* args = nullptr;
  float* scratch = nullptr;  // scores and sums (+ row copies when not direct)
  const BoxRows* rows = nullptr;
  int rank = 0;
  int64_t dim = 0, keys = 0, group = 1, window = 0;
  bool causal = true;
  bool direct = true;  // rows read the views in place (else float copies of one row at a time)
  float scale = 1, softcap = 0;
  RowFn direct_row = nullptr, copied_row = nullptr;  // one row read in place, one copied row
  BatchFn direct_batch = nullptr;  // when set, batches of rows read in place (not direct_row)
  int64_t scores_stride = 0;     // floats between the scores of batched rows
  int64_t sums_stride = 0;       // and between their column sums (after kMaxBatch scores)
  // Which part of the work (AttentionPhases): all of it, or one phase. The scores phase writes
  // the raw scores of keys [cut(tile), cut(tile + 1)) of every row (query head h) to
  // shared_out + h * shared_stride; the values phase copies each row's from shared_in.
  enum class Phase { kAll, kScores, kValues } phase = Phase::kAll;
  ScoresFn phase_scores = nullptr;
  BatchFn phase_values = nullptr;
  float* shared_out = nullptr;
  const float* shared_in = nullptr;
  int64_t shared_stride = 0;
  int tile = 0, tiles = 1;
};

// Copies `count` rows of `columns` elements starting at `index` (view strides) into dense float
// rows (half types convert exactly).
void copy_rows(const TensorView& view, const int64_t* index, int row_axis, int64_t count,
               int64_t columns, float* dst) {
  const void* base = element_address(view, index);
  const int64_t row_step = view.strides[row_axis], col_step = view.strides[row_axis + 2];
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < columns; ++j)
      dst[i * columns + j] = float_at(view.dtype, base, i * row_step + j * col_step);
}

void run_rows(const AttentionJob& job, int64_t begin, int64_t end) {
  const KernelArgs& args = *job.args;
  const TensorView &q = args.inputs[0], &k = args.inputs[1], &v = args.inputs[2];
  const int row = job.rank - 3, head = job.rank - 2, col = job.rank - 1;
  const int64_t j0 = args.box.begin(col), columns = args.box.extent(col);
  float* const scratch = job.scratch;
  int64_t index[kMaxRank] = {};  // all of it is copied (make_row)
  // Row r's inputs, its scores at `scores` (copies of its rows after its scores and sums when not
  // direct).
  auto make_row = [&](int64_t r, float* scores) {
    job.rows->index(r, index);
    const int64_t t = index[row], h = index[head];
    const int64_t first =
        job.causal && job.window > 0 ? std::max<int64_t>(0, t - job.window + 1) : 0;
    const int64_t last = job.causal ? t + 1 : job.keys;
    AttentionRow a;
    a.keys = last - first;
    a.dim = job.dim;
    a.columns = columns;
    a.scale = job.scale;
    a.softcap = job.softcap;
    a.out = args.out.at<float>(index);
    a.out_step = args.out.strides[col];
    a.scores = scores;
    index[col] = 0;
    int64_t kv_index[kMaxRank];
    std::copy(index, index + kMaxRank, kv_index);  // a fixed size: inline moves, no library call
    kv_index[row] = first;
    kv_index[head] = h / job.group;
    if (job.direct) {
      a.q = q.at<const float>(index);
      a.k = element_address(k, kv_index);
      a.k_stride = k.strides[row];
      kv_index[col] = j0;
      a.v = element_address(v, kv_index);
      a.v_stride = v.strides[row];
    } else {
      float* q_copy = scores + job.scores_stride + job.sums_stride;
      float* k_copy = q_copy + job.dim;
      float* v_copy = k_copy + job.dim * a.keys;
      copy_rows(q, index, row, 1, job.dim, q_copy);
      copy_rows(k, kv_index, row, a.keys, job.dim, k_copy);
      kv_index[col] = j0;
      copy_rows(v, kv_index, row, a.keys, columns, v_copy);
      a.q = q_copy;
      a.k = k_copy;
      a.k_stride = job.dim;
      a.v = v_copy;
      a.v_stride = columns;
    }
    if (job.phase == AttentionJob::Phase::kScores) a.scores = job.shared_out + h * job.shared_stride;
    if (job.phase == AttentionJob::Phase::kValues) std::copy_n(job.shared_in + h * job.shared_stride, a.keys, scores);
    return a;
  };
  AttentionRow batch[kMaxBatch];
  for (int64_t r = begin; r < end;) {
    batch[0] = make_row(r, scratch);
    if (!job.direct || job.direct_batch == nullptr) {
      (job.direct ? job.direct_row : job.copied_row)(batch[0]);
      ++r;
      continue;
    }
    RowBatch b;
    b.rows = batch;
    b.count = 1;
    b.groups = 1;
    b.sums_stride = job.sums_stride;
    // Following rows with as many visible keys (the other heads of this position) join it;
    // consecutive ones reading the same keys and values form a group.
    while (b.count < kMaxBatch && r + b.count < end) {
      const AttentionRow next = make_row(r + b.count, scratch + b.count * job.scores_stride);
      if (next.keys != batch[0].keys) break;
      const AttentionRow& lead = batch[b.starts[b.groups - 1]];
      if (next.k != lead.k || next.v != lead.v || b.count - b.starts[b.groups - 1] == kMaxGroup)
        b.starts[b.groups++] = b.count;
      batch[b.count++] = next;
    }
    b.starts[b.groups] = b.count;
    b.sums = scratch + kMaxBatch * job.scores_stride;
    if (job.phase == AttentionJob::Phase::kAll) {
      job.direct_batch(b);
    } else if (job.phase == AttentionJob::Phase::kValues) {
      job.phase_values(b);
    } else {
      // The tile's keys: a cut of the row's visible keys at multiples of 16 (two score runs).
      const int64_t keys = batch[0].keys;
      auto cut = [&](int k) {
        return k >= job.tiles ? keys : std::min(keys, (keys * k / job.tiles + 8) / 16 * 16);
      };
      job.phase_scores(b, cut(job.tile), cut(job.tile + 1));
    }
    r += b.count;
  }
}

// Scratch floats of a direct job, and of a copying one.
int64_t direct_floats(int64_t longest, int64_t columns) {
  return kMaxBatch * (scores_stride(longest) + sums_stride(columns));
}
int64_t copied_floats(int64_t longest, int64_t dim, int64_t columns) {
  return scores_stride(longest) + sums_stride(columns) + dim * (longest + 1) + columns * longest;
}

// Fills `job` for a call on args.box (whose rows `rows` walks): the rows read the views in
// place when `in_place` (the path reads the K/V dtype) and they are contiguous along their last
// axis; the scratch carved.
absl::Status start_job(const KernelArgs& args, const BoxRows& rows, bool in_place, AttentionJob& job) {
  const Shape& q_shape = args.inputs[0].shape;
  const Shape& k_shape = args.inputs[1].shape;
  job.args = &args;
  job.rank = args.node.rank();
  const int row = job.rank - 3, head = job.rank - 2, col = job.rank - 1;
  job.dim = q_shape[col];
  job.keys = k_shape[row];
  job.group = q_shape[head] / k_shape[head];
  const AttentionAttrs& a = args.node.attrs_as<AttentionAttrs>();
  job.causal = a.causal;
  job.window = a.window;
  job.scale = static_cast<float>(a.scale);
  job.softcap = static_cast<float>(a.softcap);
  job.rows = &rows;
  // The longest row in the box bounds every row's scores (and copies).
  const int64_t longest =
      job.causal ? std::min(args.box.end(row), job.window > 0 ? job.window : job.keys) : job.keys;
  job.direct = in_place && args.inputs[0].strides[col] == 1 &&
               args.inputs[1].strides[col] == 1 && args.inputs[2].strides[col] == 1;
  job.scores_stride = scores_stride(longest);
  job.sums_stride = sums_stride(args.box.extent(col));
  job.shared_stride = scores_stride(job.keys);
  job.scratch = ScratchCarver(args.scratch)
                    .take<float>(job.direct ? direct_floats(longest, args.box.extent(col))
                                            : copied_floats(longest, job.dim, args.box.extent(col)));
  if (job.scratch == nullptr) return absl::InternalError("[attention] kernel scratch too small");
  return absl::OkStatus();
}

// Rows contiguous along the last axis are read in place when kInPlace (the path reads the K/V
// dtype), in batches by kBatch or else one at a time by kRow; other rows are copied to floats
// one at a time and run by kCopied.
template <bool kInPlace, BatchFn kBatch, RowFn kRow, RowFn kCopied>
absl::Status attention_rows(const KernelArgs& args) {
  if (args.box.empty()) return absl::OkStatus();
  const BoxRows rows(args.box);
  AttentionJob job;
  if (absl::Status status = start_job(args, rows, kInPlace, job); !status.ok()) return status;
  job.direct_row = kRow;
  job.direct_batch = kBatch;
  job.copied_row = kCopied;
  run_rows(job, 0, rows.count());
  return absl::OkStatus();
}

// A phase's job (AttentionPhases): batches read in place, one query position.
absl::Status start_phase(const KernelArgs& args, const BoxRows& rows, BatchFn batch, AttentionJob& job) {
  if (absl::Status status = start_job(args, rows, true, job); !status.ok()) return status;
  if (!job.direct) return absl::InvalidArgumentError("[attention] phases read views contiguous along their last axis");
  for (int d = 0; d + 2 < job.rank; ++d)
    if (args.box.extent(d) != 1) return absl::InvalidArgumentError("[attention] phases run one query position");
  job.direct_batch = batch;
  return absl::OkStatus();
}

template <BatchFn kBatch, ScoresFn kScores>
absl::Status scores_phase(const KernelArgs& args, int tile, int tiles, float* shared) {
  if (tiles < 1 || tile < 0 || tile >= tiles) return absl::InvalidArgumentError("[attention] no such scores tile");
  if (args.box.empty()) return absl::OkStatus();
  const BoxRows rows(args.box);
  AttentionJob job;
  if (absl::Status status = start_phase(args, rows, kBatch, job); !status.ok()) return status;
  job.phase = AttentionJob::Phase::kScores;
  job.phase_scores = kScores;
  job.shared_out = shared;
  job.tile = tile;
  job.tiles = tiles;
  run_rows(job, 0, rows.count());
  return absl::OkStatus();
}

template <BatchFn kBatch, BatchFn kValues>
absl::Status values_phase(const KernelArgs& args, const float* shared) {
  if (args.box.empty()) return absl::OkStatus();
  const BoxRows rows(args.box);
  AttentionJob job;
  if (absl::Status status = start_phase(args, rows, kBatch, job); !status.ok()) return status;
  job.phase = AttentionJob::Phase::kValues;
  job.phase_values = kValues;
  job.shared_in = shared;
  run_rows(job, 0, rows.count());
  return absl::OkStatus();
}

}  // namespace

int64_t attention_scratch_bytes(const Graph& graph, const Node& node, bool dense_views) {
  if (node.inputs.size() < 3) return 0;
  const Shape& q = graph.node(node.inputs[0]).shape;
  const Shape& k = graph.node(node.inputs[1]).shape;
  const Shape& v = graph.node(node.inputs[2]).shape;
  if (q.size() < 3 || k.size() < 3 || v.size() < 3) return 0;
  const int64_t keys = k[k.size() - 3], dim = q.back(), columns = v.back();
  const int64_t direct = direct_floats(keys, columns);
  // bf16 K/V rows are always copied.
  const bool copies = !dense_views || graph.node(node.inputs[1]).dtype == DType::BF16;
  return scratch_take_bytes<float>(copies ? std::max(direct, copied_floats(keys, dim, columns)) : direct);
}

KernelFn attention_kernel(const Graph& graph, const Node& node, Isa isa) {
  if (graph.node(node.inputs[0]).dtype != DType::F32) return nullptr;
  const DType kv = graph.node(node.inputs[1]).dtype;
  if (kv != DType::F32 && kv != DType::F16 && kv != DType::BF16) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa >= Isa::Avx512) {
    if (kv == DType::F32) return attention_rows<true, batch_avx512<float>, nullptr, row_avx2>;
    if (kv == DType::F16) return attention_rows<true, batch_avx512<uint16_t>, nullptr, row_avx2>;
  }
  if (isa != Isa::Portable) {
    if (kv == DType::F32) return attention_rows<true, batch_avx2<float>, nullptr, row_avx2>;
    if (kv == DType::F16) return attention_rows<true, batch_avx2<uint16_t>, nullptr, row_avx2>;
    return attention_rows<false, nullptr, nullptr, row_avx2>;
  }
#endif
  (void)isa;
  if (kv == DType::F32) return attention_rows<true, nullptr, row_portable<float>, row_portable<float>>;
  if (kv == DType::F16) return attention_rows<true, nullptr, row_portable<uint16_t>, row_portable<float>>;
  return attention_rows<false, nullptr, nullptr, row_portable<float>>;
}

AttentionPhases attention_phases(const Graph& graph, const Node& node, KernelFn kernel) {
  AttentionPhases phases;
#if TESSERA_HAVE_AVX2_PATHS
  if (kernel == attention_rows<true, batch_avx512<float>, nullptr, row_avx2>)
    phases = {scores_phase<batch_avx512<float>, scores_avx512<float>>, values_phase<batch_avx512<float>, values_avx512<float>>};
  if (kernel == attention_rows<true, batch_avx512<uint16_t>, nullptr, row_avx2>)
    phases = {scores_phase<batch_avx512<uint16_t>, scores_avx512<uint16_t>>,
              values_phase<batch_avx512<uint16_t>, values_avx512<uint16_t>>};
  if (kernel == attention_rows<true, batch_avx2<float>, nullptr, row_avx2>)
    phases = {scores_phase<batch_avx2<float>, scores_avx2<float>>, values_phase<batch_avx2<float>, values_avx2<float>>};
  if (kernel == attention_rows<true, batch_avx2<uint16_t>, nullptr, row_avx2>)
    phases = {scores_phase<batch_avx2<uint16_t>, scores_avx2<uint16_t>>,
              values_phase<batch_avx2<uint16_t>, values_avx2<uint16_t>>};
#else
  (void)kernel;
#endif
  if (phases) {
    const Shape& q = graph.node(node.inputs[0]).shape;
    const Shape& k = graph.node(node.inputs[1]).shape;
    phases.shared_bytes = scratch_take_bytes<float>(q[q.size() - 2] * scores_stride(k[k.size() - 3]));
  }
  return phases;
}

}  // namespace tessera::cpu
