// Attention over a q8_0 K/V cache (engine/ops_attention.cc): f32 q and output, k and v in q8_0
// blocks of 32 along D. Each query row is quantised as cast to q8_0 does (quant::quantize_q8_0);
// a score is, over the blocks b in order, dot = dot + (dq_b * dk_b) * S_b with S_b the exact
// integer dot product of the block's int8 values, then dot * scale (softcap * tanh(x / softcap)
// after); p_i = exp(score_i - max) and their sum in key order; out[j] = (sum over keys in order
// of p_i * (dv * v_ij)) / sum, v_ij = dv * v exact in float.
//
// Exactness (DESIGN.md section 1): a row's values depend only on the row (its softmax runs over
// all of its visible keys whatever columns the box holds; a column's sum over keys is its own
// chain), never on the box or the tile. Three kernels, each with bits of its own, fixed per row:
// the portable path's plain C++ row kernel (attention_q8.inc); with AVX2 (and AVX-512 without
// VNNI) the query heads of a position that share a K/V head as a batch (attention_q8_avx2.inc:
// vpmaddubsw integer dot products, 8 keys at a time; measured ~3.6x faster than the plain
// kernel built for AVX2, kernels_bench SmolLM2 at context 1024 394 -> 109 us); with AVX-512
// VNNI such batches 16 keys at a time (attention_q8_vnni.inc: vpdpbusd), which a team may also
// run for one query position in two phases (AttentionPhases: the scores of a tile of the keys,
// then a part of the columns from all of them), with the same bits.
//
// Scratch (the call's): the batch's scores, its quantised q, the plain path's column sums.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant_avx512.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/quant.h"

namespace tessera::cpu {

namespace {

// One query row's inputs: q's D floats, its visible keys' K and V rows (first visible key at k
// and v, k_stride and v_stride bytes apart), the output columns [c0, c0 + columns); its query
// head (phases keep its scores at that row of the shared scores).
struct Q8Row {
  const float* q = nullptr;
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  int64_t k_stride = 0, v_stride = 0;
  int64_t keys = 0, dim = 0, c0 = 0, columns = 0;
  float* out = nullptr;
  int64_t out_step = 1;
  float scale = 1, softcap = 0;
  float* scores = nullptr;
  int64_t head = 0;
};

// Rows of one batch, at most (the VNNI path's heads of a position sharing a K/V head).
constexpr int kBatch = 8;
// fn.template operator()<n>() for a batch of 1 <= n <= kBatch rows: the kernels' batch templates
// (run_batch_avx2, run_batch_vnni); nothing for another n.
template <class Fn>
void for_batch_size(int n, Fn&& fn) {
  [&]<int... kIndex>(std::integer_sequence<int, kIndex...>) {
    (void)((n == kIndex + 1 && (fn.template operator()<kIndex + 1>(), true)) || ...);
  }(std::make_integer_sequence<int, kBatch>());
}

// Keys per block of the AVX2 values pass (batch_values_avx2), and the rows it takes at a time
// (their accumulators fill the 16 registers); a batch of more runs it twice.
constexpr int64_t kValueKeys = 32;
constexpr int kValueRows = 4;
static_assert(kBatch <= 2 * kValueRows, "batch_avx2 runs the values pass at most twice");

// Scratch of a call: per row of a batch (kBatch rows) its scores and its quantised q (int8
// values, as dwords for the VNNI path; per block d and, for the VNNI path, -128 times the sum
// of its values); the plain path's column sums.
struct Q8Scratch {
  float* scores = nullptr;  // kBatch x scores_stride
  float* sums = nullptr;
  float* q_d = nullptr;
  int32_t* q_words = nullptr;
  int32_t* q_bias = nullptr;
  int64_t scores_stride = 0;
};

namespace q8_portable {
#include "kernels/cpu/attention_q8.inc"
}  // namespace q8_portable

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN
namespace q8_avx2 {
#include "kernels/cpu/attention_q8_avx2.inc"
}  // namespace q8_avx2
TESSERA_AVX2_END
TESSERA_VNNI_BEGIN
namespace q8_vnni {
#include "kernels/cpu/attention_q8_vnni.inc"
}  // namespace q8_vnni
TESSERA_VNNI_END
#endif

// Bytes from one row of a q8_0 view (whole blocks along its last axis) to the next along `axis`.
int64_t q8_stride(const TensorView& view, int axis) { return view.strides[axis] / 32 * 34; }

int64_t scores_stride_of(int64_t longest) { return (longest + 15) / 16 * 16; }
// Q8Scratch::sums for a box of `columns` columns: the portable row's column sums, or the AVX2
// values pass's accumulators of kValueRows rows (columns from a multiple of 16, whole vectors).
int64_t sums_floats(int64_t columns) { return kValueRows * ((columns + 15) / 16 * 16 + 16); }

// Calls fn(rows, n, scratch) for the rows of args.box: in batches of the consecutive rows of a
// position that read the same K/V head (at most kBatch) when kBatched, else one at a time.
template <bool kBatched, class Fn>
absl::Status for_each_batch(const KernelArgs& args, Fn&& fn) {
  if (args.box.empty()) return absl::OkStatus();
  const TensorView &q = args.inputs[0], &k = args.inputs[1], &v = args.inputs[2];
  const int rank = args.node.rank();
  const int row = rank - 3, head = rank - 2, col = rank - 1;
  const int64_t dim = args.inputs[0].shape[col], keys = args.inputs[1].shape[row];
  const int64_t group = args.inputs[0].shape[head] / args.inputs[1].shape[head];
  if (q.strides[col] != 1 || k.strides[col] != 1 || v.strides[col] != 1)
    return absl::InvalidArgumentError("[attention] q8_0 K/V views are contiguous along D");
  const AttentionAttrs& a = args.node.attrs_as<AttentionAttrs>();
  const int64_t longest = a.causal ? std::min(args.box.end(row), a.window > 0 ? a.window : keys) : keys;
  ScratchCarver carver(args.scratch);
  Q8Scratch scratch;
  scratch.scores_stride = scores_stride_of(longest);
  scratch.scores = carver.take<float>(kBatch * scratch.scores_stride);
  scratch.sums = carver.take<float>(sums_floats(args.box.extent(col)));
  scratch.q_d = carver.take<float>(kBatch * dim / 32);
  scratch.q_words = carver.take<int32_t>(kBatch * dim / 2);
  scratch.q_bias = carver.take<int32_t>(kBatch * dim / 32);
  if (scratch.scores == nullptr || scratch.sums == nullptr || scratch.q_d == nullptr || scratch.q_words == nullptr ||
      scratch.q_bias == nullptr)
    return absl::InternalError("[attention] kernel scratch too small");
  const BoxRows rows(args.box);
  int64_t index[kMaxRank] = {}, kv_index[kMaxRank] = {};
  // Row r of the box, its scores at `scores`; its K/V head in kv_head.
  auto make_row = [&](int64_t r, float* scores, int64_t& kv_head) {
    rows.index(r, index);
    const int64_t t = index[row];
    const int64_t first = a.causal && a.window > 0 ? std::max<int64_t>(0, t - a.window + 1) : 0;
    const int64_t last = a.causal ? t + 1 : keys;
    Q8Row q8;
    q8.keys = last - first;
    q8.dim = dim;
    q8.c0 = index[col];
    q8.columns = args.box.extent(col);
    q8.scale = static_cast<float>(a.scale);
    q8.softcap = static_cast<float>(a.softcap);
    q8.out = args.out.at<float>(index);
    q8.out_step = args.out.strides[col];
    q8.scores = scores;
    q8.head = index[head];
    index[col] = 0;
    q8.q = q.at<const float>(index);
    std::copy(index, index + kMaxRank, kv_index);
    kv_index[row] = first;
    kv_head = kv_index[head] = index[head] / group;
    q8.k = reinterpret_cast<const uint8_t*>(element_address(k, kv_index));
    q8.v = reinterpret_cast<const uint8_t*>(element_address(v, kv_index));
    q8.k_stride = q8_stride(k, row);
    q8.v_stride = q8_stride(v, row);
    return q8;
  };
  Q8Row batch[kBatch];
  for (int64_t r = 0; r < rows.count();) {
    int64_t kv_head = 0, next_head = 0;
    batch[0] = make_row(r, scratch.scores, kv_head);
    int n = 1;
    // Following rows of the same position reading the same K/V head (the box's other heads)
    // join the batch.
    while (kBatched && n < kBatch && r + n < rows.count()) {
      const Q8Row next = make_row(r + n, scratch.scores + n * scratch.scores_stride, next_head);
      if (next_head != kv_head || next.k != batch[0].k || next.keys != batch[0].keys) break;
      batch[n++] = next;
    }
    fn(batch, n, scratch);
    r += n;
  }
  return absl::OkStatus();
}

absl::Status attention_q8_portable(const KernelArgs& args) {
  return for_each_batch<false>(args, [](Q8Row* rows, int, const Q8Scratch& s) {
    q8_portable::run_row(rows[0], reinterpret_cast<int8_t*>(s.q_words), s.q_d, s.sums);
  });
}

#if TESSERA_HAVE_AVX2_PATHS
absl::Status attention_q8_avx2(const KernelArgs& args) {
  return for_each_batch<true>(args, [](Q8Row* rows, int n, const Q8Scratch& s) { q8_avx2::run_batch_avx2(rows, n, s); });
}

absl::Status attention_q8_vnni(const KernelArgs& args) {
  return for_each_batch<true>(args, [](Q8Row* rows, int n, const Q8Scratch& s) {
    q8_vnni::run_batch_vnni(rows, n, q8_vnni::Q8Part::kAll, 0, rows[0].keys, s);
  });
}

// The phases (AttentionPhases) of attention_q8_vnni, one query position: the scores phase
// writes the scores of its tile of keys (phase_key_cut) of every row (query head h) to
// shared + h * shared_stride(args); the values phase copies each row's, then runs its softmax
// and its part of the columns.
int64_t shared_stride(const KernelArgs& args) { return scores_stride_of(args.inputs[1].shape[args.node.rank() - 3]); }

absl::Status q8_scores_phase(const KernelArgs& args, int tile, int tiles, float* shared) {
  if (absl::Status status = check_phase(args, tile, tiles); !status.ok()) return status;
  const int64_t stride = shared_stride(args);
  return for_each_batch<true>(args, [&](Q8Row* rows, int n, const Q8Scratch& s) {
    const int64_t keys = rows[0].keys;
    for (int h = 0; h < n; ++h) rows[h].scores = shared + rows[h].head * stride;
    q8_vnni::run_batch_vnni(rows, n, q8_vnni::Q8Part::kScores, phase_key_cut(keys, tile, tiles),
                            phase_key_cut(keys, tile + 1, tiles), s);
  });
}

absl::Status q8_values_phase(const KernelArgs& args, const float* shared) {
  if (absl::Status status = check_phase(args); !status.ok()) return status;
  const int64_t stride = shared_stride(args);
  return for_each_batch<true>(args, [&](Q8Row* rows, int n, const Q8Scratch& s) {
    for (int h = 0; h < n; ++h) std::copy_n(shared + rows[h].head * stride, rows[h].keys, rows[h].scores);
    q8_vnni::run_batch_vnni(rows, n, q8_vnni::Q8Part::kValues, 0, rows[0].keys, s);
  });
}
#endif

}  // namespace

int64_t attention_q8_scratch_bytes(const Graph& graph, const Node& node) {
  const Shape& q = graph.node(node.inputs[0]).shape;
  const Shape& k = graph.node(node.inputs[1]).shape;
  const int64_t keys = k[k.size() - 3], dim = q.back(), columns = node.shape.back();
  return scratch_take_bytes<float>(kBatch * scores_stride_of(keys)) + scratch_take_bytes<float>(sums_floats(columns)) +
         scratch_take_bytes<float>(kBatch * dim / 32) + scratch_take_bytes<int32_t>(kBatch * dim / 2) +
         scratch_take_bytes<int32_t>(kBatch * dim / 32);
}

KernelFn attention_q8_kernel(const Graph& graph, const Node& node, Isa isa) {
  if (graph.node(node.inputs[0]).dtype != DType::F32 || graph.node(node.inputs[1]).dtype != DType::Q8_0) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa >= Isa::Avx512Vnni) return attention_q8_vnni;
  if (isa != Isa::Portable) return attention_q8_avx2;
#endif
  (void)isa;
  return attention_q8_portable;
}

AttentionPhases attention_q8_phases(const Graph& graph, const Node& node, KernelFn kernel) {
  AttentionPhases phases;
#if TESSERA_HAVE_AVX2_PATHS
  if (kernel == attention_q8_vnni) {
    const Shape& q = graph.node(node.inputs[0]).shape;
    const Shape& k = graph.node(node.inputs[1]).shape;
    phases = {q8_scores_phase, q8_values_phase, scratch_take_bytes<float>(q[q.size() - 2] * scores_stride_of(k[k.size() - 3]))};
  }
#else
  (void)graph;
  (void)node;
  (void)kernel;
#endif
  return phases;
}

}  // namespace tessera::cpu
