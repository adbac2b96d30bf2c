// Attention over a q8_0 K/V cache (engine/ops_attention.cc): f32 q and output, k and v in q8_0
// blocks of 32 along D. Each query row is quantised as cast to q8_0 does (quant::quantize_q8_0);
// a score is, over the blocks b in order, dot = dot + (dq_b * dk_b) * S_b with S_b the exact
// integer dot product of the block's int8 values, then dot * scale (softcap * tanh(x / softcap)
// after); p_i = exp(score_i - max) and their sum in key order; out[j] = (sum over keys in order
// of p_i * (dv * v_ij)) / sum, v_ij = dv * v exact in float.
//
// Exactness (DESIGN.md section 1): a row's values depend only on the row (its softmax runs over
// all of its visible keys whatever columns the box holds; a column's sum over keys is its own
// chain), never on the box or the tile. The portable, AVX2 and AVX-512 builds of the same code
// (attention_q8.inc) give the same bits; with AVX-512 VNNI the query heads of a position that
// share a K/V head run as a batch (attention_q8_vnni.inc: integer dot products by vpdpbusd,
// fma and a vector exp), with bits of its own, as fixed per row. It negates k where q < 0, so
// an int8 of -128 in K (never written by cast's quantisation, which stays in [-127, 127]) would
// wrap.
//
// Scratch (the call's): the row's scores, its quantised q and its column sums.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant_avx512.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/quant.h"

namespace tessera::cpu {

namespace {

// One query row's inputs: q's D floats, its visible keys' K and V rows (first visible key at k
// and v, k_stride and v_stride bytes apart), the output columns [c0, c0 + columns).
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
};

// Rows of one batch, at most (the VNNI path's heads of a position sharing a K/V head).
constexpr int kBatch = 8;

namespace q8_portable {
#include "kernels/cpu/attention_q8.inc"
}  // namespace q8_portable

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN
namespace q8_avx2 {
#include "kernels/cpu/attention_q8.inc"
}  // namespace q8_avx2
TESSERA_AVX2_END
TESSERA_AVX512_BEGIN
namespace q8_avx512 {
#include "kernels/cpu/attention_q8.inc"
}  // namespace q8_avx512
TESSERA_AVX512_END
TESSERA_VNNI_BEGIN
namespace q8_vnni {
#include "kernels/cpu/attention_q8_vnni.inc"
}  // namespace q8_vnni
TESSERA_VNNI_END
#endif

using RunRow = void (*)(const Q8Row& r, int8_t* q_ints, float* q_d, float* sums);

// Bytes from one row of a q8_0 view (whole blocks along its last axis) to the next along `axis`.
int64_t q8_stride(const TensorView& view, int axis) { return view.strides[axis] / 32 * 34; }

// Scratch of a call: per row of a batch (kBatch rows) its scores and column sums, its
// quantised q (|q| or q bytes, sign masks, scales).
struct Q8Scratch {
  float* scores = nullptr;  // kBatch x scores_stride
  float* sums = nullptr;
  float* q_d = nullptr;
  uint8_t* q_bytes = nullptr;
  uint64_t* q_neg = nullptr;
  int64_t scores_stride = 0;
};

int64_t scores_stride_of(int64_t longest) { return (longest + 15) / 16 * 16; }

template <RunRow kRun>
absl::Status attention_q8(const KernelArgs& args) {
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
  scratch.sums = carver.take<float>(args.box.extent(col));
  scratch.q_d = carver.take<float>(kBatch * dim / 32);
  scratch.q_bytes = carver.take<uint8_t>(kBatch * dim);
  scratch.q_neg = carver.take<uint64_t>(kBatch * dim / 32);
  if (scratch.scores == nullptr || scratch.sums == nullptr || scratch.q_d == nullptr || scratch.q_bytes == nullptr ||
      scratch.q_neg == nullptr)
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
    if constexpr (kRun == nullptr) {
      // Following rows of the same position reading the same K/V head (the box's other heads)
      // join the batch.
      while (n < kBatch && r + n < rows.count()) {
        const Q8Row next = make_row(r + n, scratch.scores + n * scratch.scores_stride, next_head);
        if (next_head != kv_head || next.k != batch[0].k || next.keys != batch[0].keys) break;
        batch[n++] = next;
      }
#if TESSERA_HAVE_AVX2_PATHS
      q8_vnni::run_batch_vnni(batch, n, scratch.q_bytes, scratch.q_neg, scratch.q_d);
#endif
    } else {
      kRun(batch[0], reinterpret_cast<int8_t*>(scratch.q_bytes), scratch.q_d, scratch.sums);
    }
    r += n;
  }
  return absl::OkStatus();
}

}  // namespace

int64_t attention_q8_scratch_bytes(const Graph& graph, const Node& node) {
  const Shape& q = graph.node(node.inputs[0]).shape;
  const Shape& k = graph.node(node.inputs[1]).shape;
  const int64_t keys = k[k.size() - 3], dim = q.back(), columns = node.shape.back();
  return scratch_take_bytes<float>(kBatch * scores_stride_of(keys)) + scratch_take_bytes<float>(columns) +
         scratch_take_bytes<float>(kBatch * dim / 32) + scratch_take_bytes<uint8_t>(kBatch * dim) +
         scratch_take_bytes<uint64_t>(kBatch * dim / 32);
}

KernelFn attention_q8_kernel(const Graph& graph, const Node& node, Isa isa) {
  if (graph.node(node.inputs[0]).dtype != DType::F32 || graph.node(node.inputs[1]).dtype != DType::Q8_0) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa >= Isa::Avx512Vnni) return attention_q8<nullptr>;
  if (isa >= Isa::Avx512) return attention_q8<q8_avx512::run_row>;
  if (isa != Isa::Portable) return attention_q8<q8_avx2::run_row>;
#endif
  (void)isa;
  return attention_q8<q8_portable::run_row>;
}

}  // namespace tessera::cpu
