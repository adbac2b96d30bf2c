// Optimised attention, f32 q and output, f32, f16 or bf16 keys and values (semantics at the
// definition block, engine/ops_attention.cc): causal
// or not, sliding window, softcap, GQA. The portable path runs one query row (leading, t, head)
// at a time. The AVX2 path runs a batch of consecutive rows with the same number of visible
// keys (the query heads of one position, up to 16) over the keys in blocks of 48: each block's
// keys (then values) are read once from memory, sequentially, for every row of the batch, and
// rows reading the same K/V head (up to 4) share each load. Decode streams K and V of every layer
// from memory, so reading them in order, once, is what sets its speed (an f16 K/V cache halves
// those bytes; its values convert to float exactly). Rows are run in order (the backend's team
// splits the box among its workers). The AVX2 and AVX-512 paths live in attention_avx2.inc and
// attention_avx512.inc. A team may instead run one query position in two phases
// (AttentionPhases): the scores of every row for a tile of the keys, then any part of the
// outputs from all of them, each element with the fused call's bits (a score is its own dot
// product; the softmax and the column sums run over all the keys in order either way).
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
#include "kernels/cpu/simd_avx512.h"

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

#if TESSERA_HAVE_AVX2_PATHS
#include "kernels/cpu/attention_avx2.inc"
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
      const int64_t keys = batch[0].keys;
      job.phase_scores(b, phase_key_cut(keys, job.tile, job.tiles), phase_key_cut(keys, job.tile + 1, job.tiles));
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

// One phase (AttentionPhases) over args.box: batches read in place, one query position;
// `phase` sets what the job does.
template <class Phase>
absl::Status run_phase(const KernelArgs& args, BatchFn batch, Phase&& phase) {
  if (args.box.empty()) return absl::OkStatus();
  const BoxRows rows(args.box);
  AttentionJob job;
  if (absl::Status status = start_job(args, rows, true, job); !status.ok()) return status;
  if (!job.direct) return absl::InvalidArgumentError("[attention] phases read views contiguous along their last axis");
  job.direct_batch = batch;
  phase(job);
  run_rows(job, 0, rows.count());
  return absl::OkStatus();
}

template <BatchFn kBatch, ScoresFn kScores>
absl::Status scores_phase(const KernelArgs& args, int tile, int tiles, float* shared) {
  if (absl::Status status = check_phase(args, tile, tiles); !status.ok()) return status;
  return run_phase(args, kBatch, [&](AttentionJob& job) {
    job.phase = AttentionJob::Phase::kScores;
    job.phase_scores = kScores;
    job.shared_out = shared;
    job.tile = tile;
    job.tiles = tiles;
  });
}

template <BatchFn kBatch, BatchFn kValues>
absl::Status values_phase(const KernelArgs& args, const float* shared) {
  if (absl::Status status = check_phase(args); !status.ok()) return status;
  return run_phase(args, kBatch, [&](AttentionJob& job) {
    job.phase = AttentionJob::Phase::kValues;
    job.phase_values = kValues;
    job.shared_in = shared;
  });
}

}  // namespace

int64_t phase_key_cut(int64_t keys, int k, int tiles) {
  return k >= tiles ? keys : std::min(keys, (keys * k / tiles + 8) / 16 * 16);
}

absl::Status check_phase(const KernelArgs& args, int tile, int tiles) {
  if (tiles < 1 || tile < 0 || tile >= tiles) return absl::InvalidArgumentError("[attention] no such scores tile");
  if (args.box.empty()) return absl::OkStatus();
  for (int d = 0; d + 2 < args.node.rank(); ++d)
    if (args.box.extent(d) != 1) return absl::InvalidArgumentError("[attention] phases run one query position");
  return absl::OkStatus();
}

int64_t attention_scratch_bytes(const Graph& graph, const Node& node, bool dense_views) {
  if (node.inputs.size() < 3) return 0;
  const Shape& q = graph.node(node.inputs[0]).shape;
  const Shape& k = graph.node(node.inputs[1]).shape;
  const Shape& v = graph.node(node.inputs[2]).shape;
  if (q.size() < 3 || k.size() < 3 || v.size() < 3) return 0;
  if (graph.node(node.inputs[1]).dtype == DType::Q8_0) return attention_q8_scratch_bytes(graph, node);
  const int64_t keys = k[k.size() - 3], dim = q.back(), columns = v.back();
  const int64_t direct = direct_floats(keys, columns);
  // bf16 K/V rows are always copied.
  const bool copies = !dense_views || graph.node(node.inputs[1]).dtype == DType::BF16;
  return scratch_take_bytes<float>(copies ? std::max(direct, copied_floats(keys, dim, columns)) : direct);
}

#if TESSERA_HAVE_AVX2_PATHS
namespace {

// The AVX-512 path's kernel and phases for K/V elements of type T with Groups.
template <class T, class Groups>
constexpr KernelFn kAvx512Kernel = attention_rows<true, batch_avx512<T, Groups>, nullptr, row_avx2>;
template <class T, class Groups>
AttentionPhases avx512_phases() {
  return {scores_phase<batch_avx512<T, Groups>, scores_avx512<T, Groups>>,
          values_phase<batch_avx512<T, Groups>, values_avx512<T, Groups>>};
}

}  // namespace
#endif

KernelFn attention_kernel(const Graph& graph, const Node& node, Isa isa) {
  if (graph.node(node.inputs[0]).dtype != DType::F32) return nullptr;
  const DType kv = graph.node(node.inputs[1]).dtype;
  if (kv == DType::Q8_0) return attention_q8_kernel(graph, node, isa);  // attention_q8.cc
  if (kv != DType::F32 && kv != DType::F16 && kv != DType::BF16) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa >= Isa::Avx512 && kv != DType::BF16) {
    const bool wide = wide_vectors();
    if (kv == DType::F32) return wide ? kAvx512Kernel<float, Avx512Groups> : kAvx512Kernel<float, Avx512NarrowGroups>;
    return wide ? kAvx512Kernel<uint16_t, Avx512Groups> : kAvx512Kernel<uint16_t, Avx512NarrowGroups>;
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
  if (graph.node(node.inputs[1]).dtype == DType::Q8_0) return attention_q8_phases(graph, node, kernel);
  AttentionPhases phases;
#if TESSERA_HAVE_AVX2_PATHS
  if (kernel == kAvx512Kernel<float, Avx512Groups>) phases = avx512_phases<float, Avx512Groups>();
  if (kernel == kAvx512Kernel<float, Avx512NarrowGroups>) phases = avx512_phases<float, Avx512NarrowGroups>();
  if (kernel == kAvx512Kernel<uint16_t, Avx512Groups>) phases = avx512_phases<uint16_t, Avx512Groups>();
  if (kernel == kAvx512Kernel<uint16_t, Avx512NarrowGroups>) phases = avx512_phases<uint16_t, Avx512NarrowGroups>();
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
