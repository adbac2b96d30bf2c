// Attention: a first-class op so that its rules can see the causal mask (DESIGN.md section 2);
// a rule derived from matmul + mask + softmax would make every row dirty.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

// ---- attention(q [..., T, Hq, D], k [..., S, Hkv, D], v [..., S, Hkv, Dv]) -> [..., T, Hq, Dv]
// AttentionAttrs {scale, causal, window, softcap}. Float dtypes and the same leading dims for
// all three; k and v share one dtype, q's or, with an f32 q, f16 or bf16 (a half-precision K/V
// cache: their values are used exactly, the output is q's dtype) or q8_0 (an int8 K/V cache,
// D a multiple of 32: k and v dequantise exactly, and each row of q is quantised to q8_0 blocks
// (cast's quantisation) and dequantised first, so that kernels can take integer dot products
// of q and k, as llama.cpp does with a q8_0 cache); Hq % Hkv == 0 and query head h reads kv
// head h / (Hq / Hkv) (GQA).
// Visible keys of query t: causal (requires T == S) s <= t, and with window > 0 also
// s > t - window; non-causal: all keys (window must be 0). Score = scale * q.k in double, then
// softcap * tanh(score / softcap) when softcap > 0; softmax over the visible keys (max
// subtracted, keys in order), output = sum_s p_s v_s.
// Rules (causal): a dirty key/value row s reaches the queries that see it, [s, T) or
// [s, s + window); this is what makes the KV cache emerge: appending key row t dirties only
// query rows >= t, and query row t reads key rows [0 or t - window + 1, t]. Values only mix
// within a column. Non-causal: any key/value dirt reaches every query row.
// Decomposition (as HF eager attention): half k and v cast to q's dtype, permute to head-major [..., H, T, D], repeat kv heads
// (expand + reshape, HF repeat_kv), scores = q @ k^T * scale, softcap * tanh(scores / softcap)
// when softcap > 0, causal/window mask where(visible, scores, -inf) with visible built from
// aranges (j <= i, and j > i - window), the softmax op over keys, @ v, permute back. It uses
// the softmax op (a composite) so that fusion, bottom-up, sees it already fused. Its derived
// rules would dirty every query row for one dirty key row: the op's rules are strictly tighter.
namespace {

struct AttentionGeometry {
  int row = 0, head = 0, col = 0;  // axes of T (or S), heads and D (or Dv)
  int64_t t = 0, s = 0, d = 0, dv = 0, kv_heads = 1, group = 1;  // group = Hq / Hkv
  bool causal = true;
  int64_t window = 0;
};

AttentionGeometry attention_geometry(const Graph& g, const Node& node) {
  const Shape& q = input_node(g, node, 0).shape;
  const Shape& k = input_node(g, node, 1).shape;
  const Shape& v = input_node(g, node, 2).shape;
  AttentionGeometry a;
  a.col = static_cast<int>(q.size()) - 1;
  a.head = a.col - 1;
  a.row = a.col - 2;
  a.t = q[a.row];
  a.s = k[a.row];
  a.d = q[a.col];
  a.dv = v[a.col];
  a.kv_heads = k[a.head];
  a.group = a.kv_heads > 0 ? q[a.head] / a.kv_heads : 1;
  a.causal = node.attrs_as<AttentionAttrs>().causal;
  a.window = node.attrs_as<AttentionAttrs>().window;
  return a;
}

void attention_forward(const Graph& g, const Node& node, int input, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const AttentionGeometry a = attention_geometry(g, node);
  Box b = dirty;  // leading dims map to themselves
  if (input == 0) {
    b[a.col] = Interval(0, a.dv);
    out.add(b);
    return;
  }
  const Interval keys = dirty[a.row];
  if (!a.causal)
    b[a.row] = Interval(0, a.t);
  else if (a.window > 0)
    b[a.row] = Interval(keys.begin, std::min(a.t, keys.end - 1 + a.window));
  else
    b[a.row] = Interval(keys.begin, a.t);
  b[a.head] = Interval(dirty[a.head].begin * a.group, dirty[a.head].end * a.group);
  b[a.col] = input == 1 ? Interval(0, a.dv) : dirty[a.col];
  out.add(b);
}

void attention_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  const AttentionGeometry a = attention_geometry(g, node);
  if (out.empty()) {
    for (Box& b : inputs) b = Box::of_rank(node.rank());
    return;
  }
  Box q = out;
  q[a.col] = Interval(0, a.d);
  Box kv = out;
  const Interval rows = out[a.row];
  if (!a.causal)
    kv[a.row] = Interval(0, a.s);
  else if (a.window > 0)
    kv[a.row] = Interval(std::max<int64_t>(0, rows.begin - a.window + 1), rows.end);
  else
    kv[a.row] = Interval(0, rows.end);
  kv[a.head] = Interval(out[a.head].begin / a.group, (out[a.head].end - 1) / a.group + 1);
  inputs[0] = q;
  inputs[2] = kv;  // v: the box's Dv columns
  kv[a.col] = Interval(0, a.d);
  inputs[1] = kv;
}

void attention_infer(const Graph& g, Node& node) {
  const AttentionAttrs& a = node.attrs_as<AttentionAttrs>();
  const Node& q = input_node(g, node, 0);
  const Node& k = input_node(g, node, 1);
  const Node& v = input_node(g, node, 2);
  if (q.rank() < 3)
    fail("attention", absl::StrCat("q must be [..., T, Hq, D], got ", shape_string(q.shape)));
  if (k.rank() != q.rank() || v.rank() != q.rank())
    fail("attention", absl::StrCat("q, k, v must have the same rank, got ", shape_string(q.shape),
                                   ", ", shape_string(k.shape), ", ", shape_string(v.shape)));
  if (!is_float(q.dtype))
    fail("attention", absl::StrCat("q must be float, got ", dtype_name(q.dtype)));
  const bool half_kv = q.dtype == DType::F32 && (k.dtype == DType::F16 || k.dtype == DType::BF16);
  const bool q8_kv = q.dtype == DType::F32 && k.dtype == DType::Q8_0;
  if (k.dtype != v.dtype || (k.dtype != q.dtype && !half_kv && !q8_kv))
    fail("attention", absl::StrCat("dtype mismatch: q ", dtype_name(q.dtype), ", k ",
                                   dtype_name(k.dtype), ", v ", dtype_name(v.dtype)));
  const int r = q.rank();
  for (int i = 0; i < r - 3; ++i)
    if (k.shape[i] != q.shape[i] || v.shape[i] != q.shape[i])
      fail("attention", absl::StrCat("leading dims differ: q ", shape_string(q.shape), ", k ",
                                     shape_string(k.shape), ", v ", shape_string(v.shape)));
  if (k.shape[r - 3] != v.shape[r - 3] || k.shape[r - 2] != v.shape[r - 2])
    fail("attention", absl::StrCat("k ", shape_string(k.shape), " and v ", shape_string(v.shape),
                                   " must have the same rows and heads"));
  if (k.shape[r - 1] != q.shape[r - 1])
    fail("attention",
         absl::StrCat("head dim D differs: q ", q.shape[r - 1], ", k ", k.shape[r - 1]));
  const int64_t hq = q.shape[r - 2], hkv = k.shape[r - 2];
  if (hkv < 1 || hq % hkv != 0)
    fail("attention", absl::StrCat("query heads ", hq, " not a multiple of kv heads ", hkv));
  const bool causal = a.causal;
  const int64_t window = a.window;
  if (window < 0) fail("attention", absl::StrCat("window must be >= 0, got ", window));
  if (causal && q.shape[r - 3] != k.shape[r - 3])
    fail("attention", absl::StrCat("causal attention requires T == S, got T = ", q.shape[r - 3],
                                   ", S = ", k.shape[r - 3]));
  if (!causal && window > 0) fail("attention", "window requires causal attention");
  if (!causal && k.shape[r - 3] == 0 && q.shape[r - 3] > 0)
    fail("attention", "no keys to attend to");
  const double scale = a.scale, softcap = a.softcap;
  if (!std::isfinite(scale)) fail("attention", "scale must be finite");
  if (!(softcap >= 0) || !std::isfinite(softcap))
    fail("attention", absl::StrCat("softcap must be >= 0 (0 disables it), got ", softcap));
  node.shape = q.shape;
  node.shape[static_cast<size_t>(r - 1)] = v.shape[r - 1];
  node.dtype = q.dtype;
}

// [..., Hkv, S, D] -> [..., Hkv * group, S, D], kv head h serving query heads h * group + i.
Tensor repeat_kv(Tensor x, int64_t group) {
  if (group == 1) return x;
  const int head = x.rank() - 3;
  Shape spread = x.shape();
  spread.insert(spread.begin() + head + 1, 1);
  Shape tiled = spread;
  tiled[static_cast<size_t>(head + 1)] = group;
  Shape merged = x.shape();
  merged[static_cast<size_t>(head)] *= group;
  return reshape(expand(reshape(x, spread), tiled), merged);
}

Tensor attention_decompose(std::span<const Tensor> inputs, const Node& node) {
  const AttentionAttrs& a = node.attrs_as<AttentionAttrs>();
  Graph& g = *inputs[0].graph;
  const DType dtype = node.dtype;
  const int rank = node.rank();
  std::vector<int64_t> swap_rows_heads(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) swap_rows_heads[static_cast<size_t>(d)] = d;
  std::swap(swap_rows_heads[static_cast<size_t>(rank - 3)],
            swap_rows_heads[static_cast<size_t>(rank - 2)]);
  // With q8_0 K/V, q is quantised the same way (its rows by blocks of 32) and dequantised.
  const bool q8_kv = inputs[1].dtype() == DType::Q8_0;
  const Tensor q = permute(q8_kv ? cast(cast(inputs[0], DType::Q8_0), dtype) : inputs[0], swap_rows_heads);
  const int64_t group = q.dim(-3) / inputs[1].dim(-2);
  auto as_q = [&](const Tensor& t) { return t.dtype() == dtype ? t : cast(t, dtype); };
  const Tensor k = repeat_kv(permute(as_q(inputs[1]), swap_rows_heads), group);
  const Tensor v = repeat_kv(permute(as_q(inputs[2]), swap_rows_heads), group);
  Tensor scores = matmul(q, transpose(k, -1, -2)) * g.scalar(static_cast<float>(a.scale), dtype);
  if (a.softcap > 0) {
    const Tensor cap = g.scalar(static_cast<float>(a.softcap), dtype);
    scores = cap * tanh(scores / cap);
  }
  if (a.causal) {
    const int64_t t = q.dim(-2), s = k.dim(-2);
    const Tensor rows = reshape(arange(g, t, 0, 1, DType::I64), {t, 1});
    const Tensor cols = arange(g, s, 0, 1, DType::I64);
    Tensor visible = le(cols, rows);
    if (a.window > 0) {
      const Tensor window = g.scalar(static_cast<float>(a.window), DType::I64);
      visible = minimum(visible, gt(cols, rows - window));  // and
    }
    scores = where(visible, scores, g.scalar(-INFINITY, dtype));
  }
  return permute(matmul(softmax(scores, -1), v), swap_rows_heads);
}

}  // namespace

std::string AttentionAttrs::to_string() const {
  return absl::StrCat("attention{scale=", scale, causal ? ",causal" : "",
                      window > 0 ? absl::StrCat(",window=", window) : "",
                      softcap > 0 ? absl::StrCat(",softcap=", softcap) : "", "}");
}

const OpDef kAttentionDef{
    .name = "attention",
    .min_inputs = 3,
    .max_inputs = 3,
    .infer = attention_infer,
    .forward = attention_forward,
    .needed = attention_needed,
    .decompose = attention_decompose,
};

Tensor attention(Tensor q, Tensor k, Tensor v, const AttentionParams& p) {
  Graph& g = builder_graph("attention", {{"q", q}, {"k", k}, {"v", v}});
  Tensor in[] = {q, k, v};
  return g.add_node(in, p);
}

}  // namespace tessera
