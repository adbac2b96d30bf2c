// Optimised f32 attention (semantics at the definition block, engine/ops_attention.cc): causal
// or not, sliding window, softcap, GQA. The portable path runs one query row (leading, t, head)
// at a time. The AVX2 path runs a batch of consecutive rows with the same number of visible
// keys (the query heads of one position, up to 16) over the keys in blocks of 48: each block's
// keys (then values) are read once from memory, sequentially, for every row of the batch, and
// rows reading the same K/V head (up to 4) share each load. Decode streams K and V of every layer
// from memory, so reading them in order, once, is what sets its speed. Rows are run in order
// (the backend's team splits the box among its workers).
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
// column sums, or (views not contiguous along their last axis, never session buffers) the
// scores of one row plus copies of its Q/K/V rows.
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


// One query row's inputs, all contiguous along their last axis.
struct AttentionRow {
  const float* q = nullptr;  // D values
  const float* k = nullptr;  // key `first`; key first + i at k + i * k_stride
  const float* v = nullptr;  // key `first`, the box's first column; v_stride between keys
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
};

float capped(float x, float softcap) {
  return softcap > 0 ? softcap * std::tanh(x / softcap) : x;
}

// ---- portable ---------------------------------------------------------------------------------

float dot_portable(const float* a, const float* b, int64_t n) {
  float lanes[8] = {};
  for (int64_t i = 0; i < n; ++i) lanes[i % 8] = lanes[i % 8] + a[i] * b[i];
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
         ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

void row_portable(const AttentionRow& r) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < r.keys; ++i) {
    const float x = capped(dot_portable(r.q, r.k + i * r.k_stride, r.dim) * r.scale, r.softcap);
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
    for (int64_t i = 0; i < r.keys; ++i) acc = acc + r.scores[i] * r.v[i * r.v_stride + j];
    r.out[j * r.out_step] = acc / sum;
  }
}

// ---- AVX2 -------------------------------------------------------------------------------------

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN

// Dot products of q with kCount keys at once (independent chains; each is the same 8-lane
// chain over D as a single key's).
template <int kCount>
void dots_avx2(const float* q, const float* k, int64_t k_stride, int64_t dim, float* out) {
  __m256 acc[kCount];
#pragma GCC unroll 8
  for (int i = 0; i < kCount; ++i) acc[i] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
    for (int i = 0; i < kCount; ++i)
      acc[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + i * k_stride + d), acc[i]);
  }
  if (d < dim) {
    const __m256i mask = avx2::tail_mask(dim - d);
    const __m256 qv = _mm256_maskload_ps(q + d, mask);
#pragma GCC unroll 8
    for (int i = 0; i < kCount; ++i)
      acc[i] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + i * k_stride + d, mask), acc[i]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < kCount; ++i) out[i] = avx2::hsum(acc[i]);
}

// out[j] = sum_i fma(p_i, v[i][j]) / sum for kVectors * 8 columns (the last vector masked).
template <int kVectors>
void weighted_sum_avx2(const AttentionRow& r, int64_t j0, int64_t columns, float sum) {
  __m256 acc[kVectors];
#pragma GCC unroll 8
  for (int c = 0; c < kVectors; ++c) acc[c] = _mm256_setzero_ps();
  const __m256i mask = avx2::tail_mask(columns - 8 * (kVectors - 1));
  const float* v = r.v + j0;
  for (int64_t i = 0; i < r.keys; ++i, v += r.v_stride) {
    const __m256 p = _mm256_set1_ps(r.scores[i]);
#pragma GCC unroll 8
    for (int c = 0; c + 1 < kVectors; ++c)
      acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * c), acc[c]);
    acc[kVectors - 1] =
        _mm256_fmadd_ps(p, _mm256_maskload_ps(v + 8 * (kVectors - 1), mask), acc[kVectors - 1]);
  }
  const __m256 denominator = _mm256_set1_ps(sum);
  alignas(32) float result[8 * kVectors];
#pragma GCC unroll 8
  for (int c = 0; c < kVectors; ++c)
    _mm256_store_ps(result + 8 * c, _mm256_div_ps(acc[c], denominator));
  for (int64_t j = 0; j < columns; ++j) r.out[(j0 + j) * r.out_step] = result[j];
}

// Dot products of kHeads query rows that share their keys with kCount keys, each key loaded
// once for all heads. Every (head, key) is the 8-lane chain over D and the horizontal sum of
// dots_avx2, so the scores are the same bits.
template <int kHeads, int kCount>
void group_dots_avx2(const AttentionRow* rows, int64_t i0, float* const* out) {
  const float* k = rows[0].k + i0 * rows[0].k_stride;
  const int64_t k_stride = rows[0].k_stride, dim = rows[0].dim;
  __m256 acc[kHeads][kCount];
#pragma GCC unroll 4
  for (int h = 0; h < kHeads; ++h)
#pragma GCC unroll 4
    for (int i = 0; i < kCount; ++i) acc[h][i] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8) {
    __m256 kv[kCount];
#pragma GCC unroll 4
    for (int i = 0; i < kCount; ++i) kv[i] = _mm256_loadu_ps(k + i * k_stride + d);
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
    for (int i = 0; i < kCount; ++i) kv[i] = _mm256_maskload_ps(k + i * k_stride + d, mask);
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
template <int kHeads>
void group_scores_avx2(const AttentionRow* rows, int64_t i0, int64_t i1) {
  constexpr int kCount = kGroupKeys<kHeads>;
  float* out[kHeads];
  for (int h = 0; h < kHeads; ++h) out[h] = rows[h].scores;
  const int64_t row_bytes = rows[0].dim * static_cast<int64_t>(sizeof(float));
  const char* k = reinterpret_cast<const char*>(rows[0].k);
  const int64_t stride_bytes = rows[0].k_stride * static_cast<int64_t>(sizeof(float));
  int64_t i = i0;
  for (; i + kCount <= i1; i += kCount) {
    for (int j = 0; j < kCount; ++j)
      for (int64_t o = 0; o < row_bytes; o += 64)
        _mm_prefetch(k + (i + kKeyBlock + j) * stride_bytes + o, _MM_HINT_T1);
    group_dots_avx2<kHeads, kCount>(rows, i, out);
  }
  for (; i < i1; ++i) group_dots_avx2<kHeads, 1>(rows, i, out);
}

void raw_scores_avx2(const AttentionRow& r) {
  int64_t i = 0;
  for (; i + 8 <= r.keys; i += 8)
    dots_avx2<8>(r.q, r.k + i * r.k_stride, r.k_stride, r.dim, r.scores + i);
  for (; i < r.keys; ++i) dots_avx2<1>(r.q, r.k + i * r.k_stride, r.k_stride, r.dim, r.scores + i);
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
  // p = exp(score - max) in place; the padded tail vector runs the same exp.
  const __m256 m = _mm256_set1_ps(max);
  __m256 lanes = _mm256_setzero_ps();
  for (i = 0; i < r.keys; i += 8) {
    const int64_t n = std::min<int64_t>(8, r.keys - i);
    const __m256i mask = avx2::tail_mask(n);
    const __m256 p = avx2::exp(_mm256_sub_ps(_mm256_maskload_ps(r.scores + i, mask), m));
    _mm256_maskstore_ps(r.scores + i, mask, p);
    lanes = _mm256_add_ps(lanes, _mm256_and_ps(p, _mm256_castsi256_ps(mask)));
  }
  return avx2::hsum(lanes);
}

// out = (sum_s p_s v_s) / sum for one row.
void weighted_avx2(const AttentionRow& r, float sum) {
  // Columns in chunks of 64 (8 accumulators); each column's chain is independent of the chunk.
  for (int64_t j0 = 0; j0 < r.columns; j0 += 64) {
    const int64_t columns = std::min<int64_t>(64, r.columns - j0);
    switch ((columns + 7) / 8) {
      case 1:
        weighted_sum_avx2<1>(r, j0, columns, sum);
        break;
      case 2:
        weighted_sum_avx2<2>(r, j0, columns, sum);
        break;
      case 3:
        weighted_sum_avx2<3>(r, j0, columns, sum);
        break;
      case 4:
        weighted_sum_avx2<4>(r, j0, columns, sum);
        break;
      case 5:
        weighted_sum_avx2<5>(r, j0, columns, sum);
        break;
      case 6:
        weighted_sum_avx2<6>(r, j0, columns, sum);
        break;
      case 7:
        weighted_sum_avx2<7>(r, j0, columns, sum);
        break;
      default:
        weighted_sum_avx2<8>(r, j0, columns, sum);
        break;
    }
  }
}

void row_avx2(const AttentionRow& r) {
  raw_scores_avx2(r);
  weighted_avx2(r, softmax_avx2(r));
}

// Adds p_i * v_i over keys [i0, i1) to the column sums of kHeads rows sharing their values,
// 16 columns at a time, each V vector loaded once for all rows; row h's sums are at sums[h]
// (padded to 16 columns). Every column's chain is weighted_sum_avx2's: fma over the keys in
// order (the partial sum kept as a float between blocks), so the same bits.
template <int kHeads>
void group_weighted_avx2(const AttentionRow* rows, float* const* sums, int64_t i0, int64_t i1) {
  const AttentionRow& r0 = rows[0];
  for (int64_t j0 = 0; j0 < r0.columns; j0 += 16) {
    const int64_t columns = std::min<int64_t>(16, r0.columns - j0);
    const __m256i mask0 = avx2::tail_mask(std::min<int64_t>(8, columns));
    const __m256i mask1 = avx2::tail_mask(std::max<int64_t>(0, columns - 8));
    __m256 acc[kHeads][2];
#pragma GCC unroll 4
    for (int h = 0; h < kHeads; ++h) {
      acc[h][0] = _mm256_loadu_ps(sums[h] + j0);
      acc[h][1] = _mm256_loadu_ps(sums[h] + j0 + 8);
    }
    const float* v = r0.v + j0 + i0 * r0.v_stride;
    for (int64_t i = i0; i < i1; ++i, v += r0.v_stride) {
      _mm_prefetch(reinterpret_cast<const char*>(v + kKeyBlock * r0.v_stride), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(v + kKeyBlock * r0.v_stride + 15), _MM_HINT_T1);
      const __m256 v0 = _mm256_maskload_ps(v, mask0), v1 = _mm256_maskload_ps(v + 8, mask1);
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

// One key block [i0, i1) of group g of a batch: its scores, or its values' sums.
template <int kHeads>
void group_block_avx2(const RowBatch& b, int g, bool scores, int64_t i0, int64_t i1) {
  const AttentionRow* rows = b.rows + b.starts[g];
  if (scores) return group_scores_avx2<kHeads>(rows, i0, i1);
  float* sums[kHeads];
  for (int h = 0; h < kHeads; ++h) sums[h] = b.sums + (b.starts[g] + h) * b.sums_stride;
  group_weighted_avx2<kHeads>(rows, sums, i0, i1);
}

void block_avx2(const RowBatch& b, int g, bool scores, int64_t i0, int64_t i1) {
  switch (b.starts[g + 1] - b.starts[g]) {
    case 1:
      return group_block_avx2<1>(b, g, scores, i0, i1);
    case 2:
      return group_block_avx2<2>(b, g, scores, i0, i1);
    case 3:
      return group_block_avx2<3>(b, g, scores, i0, i1);
    default:
      return group_block_avx2<4>(b, g, scores, i0, i1);
  }
}

// The rows of a batch: scores block by block (each block's keys read once for every row, in
// memory order), each row's softmax, then the values block by block the same way.
void batch_avx2(const RowBatch& b) {
  const int64_t keys = b.rows[0].keys;
  for (int64_t i0 = 0; i0 < keys; i0 += kKeyBlock)
    for (int g = 0; g < b.groups; ++g) block_avx2(b, g, true, i0, std::min(keys, i0 + kKeyBlock));
  // The first block of values is fetched while the softmaxes run.
  for (int g = 0; g < b.groups; ++g) {
    const AttentionRow& r = b.rows[b.starts[g]];
    const int64_t row_bytes = r.columns * static_cast<int64_t>(sizeof(float));
    for (int64_t i = 0; i < std::min(keys, kKeyBlock); ++i)
      for (int64_t o = 0; o < row_bytes + 63; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(r.v + i * r.v_stride) + o, _MM_HINT_T1);
  }
  float total[kMaxBatch];
  for (int r = 0; r < b.count; ++r) {
    total[r] = softmax_avx2(b.rows[r]);
    std::fill_n(b.sums + r * b.sums_stride, b.sums_stride, 0.0f);
  }
  for (int64_t i0 = 0; i0 < keys; i0 += kKeyBlock)
    for (int g = 0; g < b.groups; ++g) block_avx2(b, g, false, i0, std::min(keys, i0 + kKeyBlock));
  for (int r = 0; r < b.count; ++r) {
    const AttentionRow& row = b.rows[r];
    const float* sums = b.sums + r * b.sums_stride;
    for (int64_t j = 0; j < row.columns; ++j) row.out[j * row.out_step] = sums[j] / total[r];
  }
}

TESSERA_AVX2_END
#endif  // TESSERA_HAVE_AVX2_PATHS

// ---- driver -----------------------------------------------------------------------------------

using RowFn = void (*)(const AttentionRow&);
using BatchFn = void (*)(const RowBatch& batch);

struct AttentionJob {
  const KernelArgs* args = nullptr;
  float* scratch = nullptr;  // scores (+ row copies when strided)
  const BoxRows* rows = nullptr;
  int rank = 0;
  int64_t dim = 0, keys = 0, group = 1, window = 0;
  bool causal = true;
  float scale = 1, softcap = 0;
  RowFn row_fn = nullptr;
  BatchFn batch_fn = nullptr;  // nullptr: one row at a time
  int64_t scores_stride = 0;   // floats between the scores of batched rows
  int64_t sums_stride = 0;     // and between their column sums (after kMaxBatch scores)
};

// Copies `count` rows of `columns` elements starting at `first` (view strides) into dense rows.
void copy_rows(const TensorView& view, const int64_t* index, int row_axis, int64_t count,
               int64_t columns, float* dst) {
  const float* base = view.at<const float>(index);
  const int64_t row_step = view.strides[row_axis], col_step = view.strides[row_axis + 2];
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < columns; ++j) dst[i * columns + j] = base[i * row_step + j * col_step];
}

void run_rows(const AttentionJob& job, int64_t begin, int64_t end) {
  const KernelArgs& args = *job.args;
  const TensorView &q = args.inputs[0], &k = args.inputs[1], &v = args.inputs[2];
  const int row = job.rank - 3, head = job.rank - 2, col = job.rank - 1;
  const int64_t j0 = args.box.begin(col), columns = args.box.extent(col);
  const bool contiguous = q.strides[col] == 1 && k.strides[col] == 1 && v.strides[col] == 1;
  float* const scratch = job.scratch;
  int64_t index[kMaxRank];
  // Row r's inputs, its scores at `scores` (copies of strided inputs after them).
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
    std::copy(index, index + job.rank, kv_index);
    kv_index[row] = first;
    kv_index[head] = h / job.group;
    if (contiguous) {
      a.q = q.at<const float>(index);
      a.k = k.at<const float>(kv_index);
      a.k_stride = k.strides[row];
      kv_index[col] = j0;
      a.v = v.at<const float>(kv_index);
      a.v_stride = v.strides[row];
    } else {
      float* q_copy = scores + a.keys + 8;
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
    return a;
  };
  AttentionRow batch[kMaxBatch];
  for (int64_t r = begin; r < end;) {
    batch[0] = make_row(r, scratch);
    if (!contiguous || job.batch_fn == nullptr) {
      job.row_fn(batch[0]);
      ++r;
      continue;
    }
    // Following rows with as many visible keys (the other heads of this position) join it;
    // consecutive ones reading the same keys and values form a group.
    RowBatch b;
    b.rows = batch;
    b.count = 1;
    b.groups = 1;
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
    b.sums_stride = job.sums_stride;
    job.batch_fn(b);
    r += b.count;
  }
}

template <RowFn kRow, BatchFn kBatch>
absl::Status attention_f32(const KernelArgs& args) {
  if (args.box.empty()) return absl::OkStatus();
  const Shape& q_shape = args.inputs[0].shape;
  const Shape& k_shape = args.inputs[1].shape;
  AttentionJob job;
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
  job.row_fn = kRow;
  job.batch_fn = kBatch;
  const BoxRows rows(args.box);
  job.rows = &rows;
  // The longest row in the box bounds every row's scores (and copies).
  const int64_t longest =
      job.causal ? std::min(args.box.end(row), job.window > 0 ? job.window : job.keys) : job.keys;
  const bool contiguous = args.inputs[0].strides[col] == 1 && args.inputs[1].strides[col] == 1 &&
                          args.inputs[2].strides[col] == 1;
  // Contiguous rows may be batched: scores and column sums per row of a batch.
  job.scores_stride = scores_stride(longest);
  job.sums_stride = sums_stride(args.box.extent(col));
  job.scratch = ScratchCarver(args.scratch)
                    .take<float>(contiguous ? kMaxBatch * (job.scores_stride + job.sums_stride)
                                            : longest + 8 + job.dim * (longest + 1) + args.box.extent(col) * longest);
  if (job.scratch == nullptr) return absl::InternalError("[attention] kernel scratch too small");
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
  return scratch_take_bytes<float>(
      std::max(kMaxBatch * (scores_stride(keys) + sums_stride(columns)), keys + 8 + (dense_views ? 0 : dim * (keys + 1) + columns * keys)));
}

KernelFn attention_kernel(const Graph& graph, const Node& node, Isa isa) {
  for (NodeId in : node.inputs)
    if (graph.node(in).dtype != DType::F32) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa != Isa::Portable) return attention_f32<row_avx2, batch_avx2>;
#endif
  (void)isa;
  return attention_f32<row_portable, nullptr>;
}

}  // namespace tessera::cpu
