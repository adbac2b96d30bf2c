// Reference attention kernel. Semantics and attribute encoding are documented at the definition
// block in engine/ops_attention.cc.
//
// Exactness: an output element depends only on its (leading, t, head) row and its column, never
// on the box: the whole softmax of a row is computed whatever columns the box asks for, with keys
// in a fixed order. Reads stay inside the needed boxes: query t reads only its visible keys.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/quant.h"
#include "kernels/ref/access.h"

namespace tessera::ref {

namespace {

// Scores of up to this many visible keys are kept on the stack; longer rows recompute them,
// which gives the same bits (kernels never allocate).
constexpr int64_t kScoreCache = 1024;
// Output columns accumulated at once.
constexpr int64_t kColumnChunk = 256;

}  // namespace

absl::Status attention(const KernelArgs& args) {
  if (args.box.empty()) return absl::OkStatus();  // the row loop below would read q and k
  const TensorView& q = args.inputs[0];
  const TensorView& k = args.inputs[1];
  const TensorView& v = args.inputs[2];
  const int rank = args.node.rank();
  const int row = rank - 3, head = rank - 2, col = rank - 1;
  const Shape& q_shape = args.inputs[0].shape;
  const Shape& k_shape = args.inputs[1].shape;
  const int64_t dim = q_shape[col], keys = k_shape[row], group = q_shape[head] / k_shape[head];
  const AttentionAttrs& a = args.node.attrs_as<AttentionAttrs>();
  const bool causal = a.causal;
  const int64_t window = a.window;
  const double scale = a.scale, softcap = a.softcap;
  const size_t index_bytes = sizeof(int64_t) * static_cast<size_t>(rank);
  const bool q8_kv = k.dtype == DType::Q8_0;

  Box rows = args.box;  // one entry per (leading, t, head); columns are handled per row
  rows[col] = Interval(0, 1);
  int64_t qi[kMaxRank], ki[kMaxRank], vi[kMaxRank], oi[kMaxRank];
  double cached[kScoreCache];
  double acc[kColumnChunk];
  for_each_index(rows, [&](const int64_t* r) {
    std::memcpy(qi, r, index_bytes);
    std::memcpy(ki, r, index_bytes);
    std::memcpy(vi, r, index_bytes);
    std::memcpy(oi, r, index_bytes);
    ki[head] = vi[head] = r[head] / group;
    const int64_t t = r[row];
    const int64_t first = causal && window > 0 ? std::max<int64_t>(0, t - window + 1) : 0;
    const int64_t last = causal ? t + 1 : keys;
    auto score = [&](int64_t s) {
      ki[row] = s;
      double dot = 0;
      if (q8_kv) {  // q quantised and dequantised by blocks of 32 (attention's definition)
        float block[32], rounded[32];
        uint8_t packed[34];
        for (int64_t d0 = 0; d0 < dim; d0 += 32) {
          for (int64_t d = d0; d < d0 + 32; ++d) {
            qi[col] = d;
            block[d - d0] = static_cast<float>(load(q, qi));
          }
          quant::quantize_q8_0(block, packed);
          quant::dequantize_q8_0(packed, rounded);
          for (int64_t d = d0; d < d0 + 32; ++d) {
            ki[col] = d;
            dot += static_cast<double>(rounded[d - d0]) * load(k, ki);
          }
        }
      } else {
        for (int64_t d = 0; d < dim; ++d) {
          qi[col] = ki[col] = d;
          dot += load(q, qi) * load(k, ki);
        }
      }
      const double x = scale * dot;
      return softcap > 0 ? softcap * std::tanh(x / softcap) : x;
    };
    const bool use_cache = last - first <= kScoreCache;
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t s = first; s < last; ++s) {
      const double x = score(s);
      if (use_cache) cached[s - first] = x;
      max = std::max(max, x);
    }
    auto weight = [&](int64_t s) {
      return std::exp((use_cache ? cached[s - first] : score(s)) - max);
    };
    double denominator = 0;
    for (int64_t s = first; s < last; ++s) denominator += weight(s);
    for (int64_t j0 = args.box.begin(col); j0 < args.box.end(col); j0 += kColumnChunk) {
      const int64_t j1 = std::min(j0 + kColumnChunk, args.box.end(col));
      std::fill(acc, acc + (j1 - j0), 0.0);
      for (int64_t s = first; s < last; ++s) {
        const double p = weight(s) / denominator;
        vi[row] = s;
        for (int64_t j = j0; j < j1; ++j) {
          vi[col] = j;
          acc[j - j0] += p * load(v, vi);
        }
      }
      for (int64_t j = j0; j < j1; ++j) {
        oi[col] = j;
        store(args.out, oi, acc[j - j0]);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace tessera::ref
