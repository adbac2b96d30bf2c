// Pass "fuse" (a): user-written composites replaced by the composite op. See planner/fuse.h.
//
// Candidates are found from the shape of the subgraph under a node (e.g. a division of an exp
// by its sum suggests softmax, and gives x and the axis); a candidate is accepted only when the
// composite's own decomposition, built over the candidate's inputs, equals the user's subgraph
// node for node (kinds, attributes, dtypes, shapes, constant values). A composite inside a
// decomposition (the softmax inside attention, the sigmoid inside silu) matches either that op
// or, expanded, its own decomposition. Roots are tried from the last node back, so the largest
// composite wins (rms_norm with its weight, not rms_norm without it times the weight); the
// nodes a match covers are not tried as roots again. Roots are binary ops, permutes and relu.
#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/container/flat_hash_map.h"

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "planner/fuse.h"

namespace tessera {

namespace {

struct Candidate {
  std::vector<NodeId> inputs;  // in the graph being built
  OpAttrs attrs;
};

class View {
 public:
  explicit View(const Graph& g) : g_(g), readers_(static_cast<size_t>(g.size()), 0) {
    for (NodeId id = 0; id < g.size(); ++id)
      for (NodeId in : g.node(id).inputs) readers_[static_cast<size_t>(in)] += 1;
    for (const auto& [name, id] : g.outputs()) readers_[static_cast<size_t>(id)] += 1;  // read by the user
  }
  // Readers of a node's value: consumers, and the user when it is an output.
  int readers(NodeId id) const { return id >= 0 ? readers_[static_cast<size_t>(id)] : 0; }
  const Node& node(NodeId id) const { return g_.node(id); }
  NodeId in(NodeId id, size_t i) const {
    if (id < 0) return -1;
    const Node& n = g_.node(id);
    return i < n.inputs.size() ? n.inputs[i] : -1;
  }
  bool is(NodeId id, OpKind kind) const { return id >= 0 && node(id).kind == kind; }
  bool unary(NodeId id, UnaryFn fn) const {
    return id >= 0 && node(id).kind == OpKind::Unary && node(id).attrs_as<UnaryAttrs>().fn == fn;
  }
  bool binary(NodeId id, BinaryFn fn) const {
    return id >= 0 && node(id).kind == OpKind::Binary && node(id).attrs_as<BinaryAttrs>().fn == fn;
  }
  const ReduceAttrs* reduce(NodeId id, ReduceFn fn) const {
    if (id < 0 || node(id).kind != OpKind::Reduce) return nullptr;
    const ReduceAttrs& a = node(id).attrs_as<ReduceAttrs>();
    return a.fn == fn && a.keepdims && a.axes.size() == 1 ? &a : nullptr;
  }
  // The value of a one-element constant, converted to double.
  std::optional<double> scalar(NodeId id) const {
    if (id < 0 || node(id).kind != OpKind::Constant || node(id).volume() != 1) return std::nullopt;
    const void* p = g_.constant_data(node(id).constant).data;
    switch (node(id).dtype) {
      case DType::F32: { float v; std::memcpy(&v, p, 4); return v; }
      case DType::F16: { uint16_t h; std::memcpy(&h, p, 2); return half_to_float(h); }
      case DType::BF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_float(h); }
      case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
      case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
      default: return std::nullopt;
    }
  }

 private:
  const Graph& g_;
  std::vector<int> readers_;
};

// ---- candidates, by the kind of the subgraph's last node ----------------------------------

// e / sum(e) with e = exp(x - max(x)); or 1 / (1 + exp(-x)).
void at_div(const View& v, NodeId root, std::vector<Candidate>& out) {
  const NodeId e = v.in(root, 0), total = v.in(root, 1);
  if (const ReduceAttrs* sum = v.reduce(total, ReduceFn::Sum); sum && v.unary(e, UnaryFn::Exp)) {
    const NodeId shifted = v.in(e, 0);
    if (v.binary(shifted, BinaryFn::Sub)) out.push_back({{v.in(shifted, 0)}, SoftmaxAttrs{sum->axes[0], false}});
  }
  const NodeId denominator = v.in(root, 1);
  if (v.binary(denominator, BinaryFn::Add) && v.unary(v.in(denominator, 1), UnaryFn::Exp)) {
    const NodeId negated = v.in(v.in(denominator, 1), 0);
    if (v.unary(negated, UnaryFn::Neg)) out.push_back({{v.in(negated, 0)}, UnaryAttrs{UnaryFn::Sigmoid}});
  }
}

// (x - max(x)) - log(sum(exp(x - max(x)))).
void at_sub(const View& v, NodeId root, std::vector<Candidate>& out) {
  const NodeId shifted = v.in(root, 0);
  if (!v.binary(shifted, BinaryFn::Sub) || !v.unary(v.in(root, 1), UnaryFn::Log)) return;
  if (const ReduceAttrs* max = v.reduce(v.in(shifted, 1), ReduceFn::Max))
    out.push_back({{v.in(shifted, 0)}, SoftmaxAttrs{max->axes[0], true}});
}

// a * rsqrt(mean(...) + eps): rms_norm when a is x and the mean is of x * x, layer_norm when a
// is x - mean(x). `extra` are the parameters found above it (weight, then bias).
void normalised(const View& v, NodeId y, const std::vector<NodeId>& extra, bool has_weight, bool has_bias,
                std::vector<Candidate>& out) {
  if (!v.binary(y, BinaryFn::Mul) || !v.unary(v.in(y, 1), UnaryFn::Rsqrt)) return;
  const NodeId add = v.in(v.in(y, 1), 0);
  if (!v.binary(add, BinaryFn::Add)) return;
  const std::optional<double> eps = v.scalar(v.in(add, 1));
  if (!eps) return;
  const NodeId a = v.in(y, 0);
  if (v.binary(a, BinaryFn::Sub) && v.reduce(v.in(a, 1), ReduceFn::Mean)) {
    std::vector<NodeId> inputs = {v.in(a, 0)};
    inputs.insert(inputs.end(), extra.begin(), extra.end());
    out.push_back({inputs, LayerNormAttrs{*eps, has_weight, has_bias}});
  } else if (!has_bias) {
    std::vector<NodeId> inputs = {a};
    inputs.insert(inputs.end(), extra.begin(), extra.end());
    out.push_back({inputs, RmsNormAttrs{*eps}});
  }
}

void at_mul(const View& v, NodeId root, std::vector<Candidate>& out) {
  const NodeId a = v.in(root, 0), b = v.in(root, 1);
  if (v.unary(b, UnaryFn::Sigmoid) && v.in(b, 0) == a) out.push_back({{a}, UnaryAttrs{UnaryFn::Silu}});
  if (v.binary(a, BinaryFn::Mul) && v.scalar(v.in(a, 0))) {
    out.push_back({{v.in(a, 1)}, UnaryAttrs{UnaryFn::GeluTanh}});
    out.push_back({{v.in(a, 1)}, UnaryAttrs{UnaryFn::GeluErf}});
  }
  normalised(v, root, {}, false, false, out);
  normalised(v, a, {b}, true, false, out);
}

// conv2d's epilogue (Conv2dAttrs): `sum` (a binary add, or -1) of a plain conv and a residual,
// `relu` whether relu follows. Only a conv (and add) read by nothing else: a value another
// reader needs would be computed twice.
void conv_epilogue(const View& v, NodeId root, NodeId sum, bool relu, std::vector<Candidate>& out) {
  auto plain_conv = [&](NodeId id) {
    return v.is(id, OpKind::Conv2d) && !v.node(id).attrs_as<Conv2dAttrs>().has_epilogue() && v.readers(id) == 1;
  };
  auto candidate = [&](NodeId conv, NodeId residual, ConvResidual order) {
    Conv2dAttrs attrs = v.node(conv).attrs_as<Conv2dAttrs>();
    attrs.residual = order;
    attrs.relu = relu;
    std::vector<NodeId> inputs(v.node(conv).inputs.begin(), v.node(conv).inputs.end());
    if (residual >= 0) inputs.push_back(residual);
    out.push_back({std::move(inputs), attrs});
  };
  if (sum < 0) {
    if (const NodeId conv = v.in(root, 0); plain_conv(conv)) candidate(conv, -1, ConvResidual::None);
    return;
  }
  if (sum != root && v.readers(sum) != 1) return;
  const NodeId a = v.in(sum, 0), b = v.in(sum, 1);
  if (plain_conv(a)) candidate(a, b, ConvResidual::ConvFirst);
  if (plain_conv(b) && b != a) candidate(b, a, ConvResidual::ResidualFirst);
}

void at_add(const View& v, NodeId root, std::vector<Candidate>& out) {
  const NodeId y = v.in(root, 0), bias = v.in(root, 1);
  normalised(v, y, {bias}, false, true, out);
  if (v.binary(y, BinaryFn::Mul)) normalised(v, v.in(y, 0), {v.in(y, 1), bias}, true, true, out);
  conv_epilogue(v, root, root, false, out);
}

// relu(conv) and relu(conv + residual) (either order): conv2d's epilogue.
void at_relu(const View& v, NodeId root, std::vector<Candidate>& out) {
  const NodeId x = v.in(root, 0);
  conv_epilogue(v, root, v.binary(x, BinaryFn::Add) ? x : -1, true, out);
}

// permute(matmul(softmax(scores), v'), rows <-> heads) with scores = q' k'^T * scale, optionally
// soft-capped and masked; q', k', v' are permutes of q, k, v (k and v repeated for GQA).
void at_permute(const View& v, NodeId root, std::vector<Candidate>& out) {
  const NodeId product = v.in(root, 0);
  if (!v.is(product, OpKind::Matmul)) return;
  // The probabilities: a softmax op, or one written out (e / sum(e), e = exp(s - max(s))).
  const NodeId probs = v.in(product, 0);
  NodeId scores = -1;
  if (v.is(probs, OpKind::Softmax) && !v.node(probs).attrs_as<SoftmaxAttrs>().log) scores = v.in(probs, 0);
  else if (v.binary(probs, BinaryFn::Div) && v.unary(v.in(probs, 0), UnaryFn::Exp))
    scores = v.in(v.in(v.in(probs, 0), 0), 0);
  if (scores < 0) return;
  // The first permute below a chain of movement ops: the head-major view of q, k or v.
  auto source = [&](NodeId id) -> NodeId {
    for (int depth = 0; id >= 0 && depth < 6; ++depth, id = v.in(id, 0)) {
      const OpKind kind = v.node(id).kind;
      if (kind == OpKind::Permute) return v.in(id, 0);
      if (kind != OpKind::Reshape && kind != OpKind::Expand) return -1;
    }
    return -1;
  };
  AttentionAttrs attrs;
  attrs.causal = false;
  if (v.is(scores, OpKind::Where)) {
    attrs.causal = true;
    const NodeId visible = v.in(scores, 0);
    if (v.binary(visible, BinaryFn::Minimum)) {
      const NodeId shifted = v.in(v.in(visible, 1), 1);
      const std::optional<double> window = v.scalar(v.in(shifted, 1));
      if (!window) return;
      attrs.window = static_cast<int64_t>(*window);
    }
    scores = v.in(scores, 1);
  }
  if (v.binary(scores, BinaryFn::Mul) && v.unary(v.in(scores, 1), UnaryFn::Tanh)) {
    const std::optional<double> cap = v.scalar(v.in(scores, 0));
    if (!cap) return;
    attrs.softcap = *cap;
    scores = v.in(v.in(v.in(scores, 1), 0), 0);
  }
  if (!v.binary(scores, BinaryFn::Mul)) return;
  const std::optional<double> scale = v.scalar(v.in(scores, 1));
  const NodeId qk = v.in(scores, 0);
  if (!scale || !v.is(qk, OpKind::Matmul)) return;
  attrs.scale = *scale;
  const NodeId q = source(v.in(qk, 0));
  const NodeId k_transposed = v.in(qk, 1);
  const NodeId k = v.is(k_transposed, OpKind::Permute) ? source(v.in(k_transposed, 0)) : -1;
  const NodeId values = source(v.in(product, 1));
  if (q < 0 || k < 0 || values < 0) return;
  out.push_back({{q, k, values}, attrs});
}

// Does the decomposition of `c` equal the subgraph of `g` under `root`? On success `covered`
// receives the nodes of `g` the decomposition matched (the candidate's inputs excluded).
bool verified(const Graph& g, NodeId root, const Candidate& c, std::vector<NodeId>& covered) {
  Graph tmpl;
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Node& n = g.node(c.inputs[i]);
    inputs.push_back(tmpl.input(absl::StrCat("in", i), n.shape, n.dtype));
  }
  Tensor composite, decomposition;
  try {
    composite = tmpl.add_node(inputs, c.attrs);
    decomposition = decompose(tmpl.node(composite.id), inputs);
  } catch (const Error&) {
    return false;  // the candidate's inputs or attributes do not make a valid composite
  }
  if (decomposition.graph == nullptr) return false;
  const Node& want = g.node(root);
  const Node& got = tmpl.node(composite.id);
  if (got.shape != want.shape || got.dtype != want.dtype) return false;
  absl::flat_hash_map<NodeId, NodeId> bound;  // template node -> graph node
  for (size_t i = 0; i < inputs.size(); ++i) bound[inputs[i].id] = c.inputs[i];
  std::function<bool(NodeId, NodeId)> match = [&](NodeId t, NodeId u) -> bool {
    if (auto it = bound.find(t); it != bound.end()) return it->second == u;
    const Node tn = tmpl.node(t);  // a copy: expanding below adds nodes to tmpl
    const Node& un = g.node(u);
    if (tn.kind == OpKind::Input || tn.dtype != un.dtype || tn.shape != un.shape) return false;
    bool same = tn.kind == un.kind;
    if (same && tn.kind == OpKind::Constant) {
      const ConstantData& a = tmpl.constant_data(tn.constant);
      const ConstantData& d = g.constant_data(un.constant);
      same = a.size_bytes == d.size_bytes && std::memcmp(a.data, d.data, static_cast<size_t>(a.size_bytes)) == 0;
    } else if (same) {
      same = tn.attrs == un.attrs && tn.inputs.size() == un.inputs.size();
      for (size_t i = 0; same && i < tn.inputs.size(); ++i) same = match(tn.inputs[i], un.inputs[i]);
    }
    if (!same && tn.kind != OpKind::Constant) {
      // A composite in the template may also be written out in the graph.
      std::vector<Tensor> ins;
      for (NodeId in : tn.inputs) ins.push_back(Tensor{&tmpl, in});
      Tensor expanded;
      try {
        expanded = decompose(tn, ins);
      } catch (const Error&) {
        return false;
      }
      same = expanded.graph != nullptr && match(expanded.id, u);
    }
    if (same) {
      bound[t] = u;
      covered.push_back(u);
    }
    return same;
  };
  covered.clear();
  return match(decomposition.id, root);
}

}  // namespace

std::optional<Rewritten> fuse_patterns(const Graph& graph, FuseReport& report) {
  const View v(graph);
  std::vector<std::optional<Candidate>> chosen(static_cast<size_t>(graph.size()));
  std::vector<uint8_t> covered(static_cast<size_t>(graph.size()), 0);
  std::vector<Candidate> candidates;
  std::vector<NodeId> matched;
  for (NodeId id = graph.size() - 1; id >= 0; --id) {
    const Node& node = graph.node(id);
    const bool relu = node.kind == OpKind::Unary && node.attrs_as<UnaryAttrs>().fn == UnaryFn::Relu;
    if (covered[static_cast<size_t>(id)] || (node.kind != OpKind::Binary && node.kind != OpKind::Permute && !relu))
      continue;
    candidates.clear();
    if (node.kind == OpKind::Permute) {
      at_permute(v, id, candidates);
    } else if (relu) {
      at_relu(v, id, candidates);
    } else {
      switch (node.attrs_as<BinaryAttrs>().fn) {
        case BinaryFn::Div: at_div(v, id, candidates); break;
        case BinaryFn::Sub: at_sub(v, id, candidates); break;
        case BinaryFn::Mul: at_mul(v, id, candidates); break;
        case BinaryFn::Add: at_add(v, id, candidates); break;
        default: break;
      }
    }
    for (Candidate& c : candidates) {
      if (std::find(c.inputs.begin(), c.inputs.end(), -1) != c.inputs.end() || !verified(graph, id, c, matched))
        continue;
      for (NodeId m : matched) covered[static_cast<size_t>(m)] = 1;
      chosen[static_cast<size_t>(id)] = std::move(c);
      break;
    }
  }
  if (std::none_of(chosen.begin(), chosen.end(), [](const std::optional<Candidate>& c) { return c.has_value(); }))
    return std::nullopt;
  return rebuild(graph, [&](NodeId id, Graph& out, absl::FunctionRef<Tensor(NodeId)> mapped) -> std::optional<Tensor> {
    const std::optional<Candidate>& c = chosen[static_cast<size_t>(id)];
    if (!c) return std::nullopt;
    std::vector<Tensor> inputs;
    for (NodeId in : c->inputs) inputs.push_back(mapped(in));
    const Tensor fused = out.add_node(inputs, c->attrs);
    report.patterns += 1;
    report.fused.push_back(absl::StrCat("pattern at %", id, " -> ", op_display_name(out.node(fused.id))));
    return fused;
  });
}

}  // namespace tessera
