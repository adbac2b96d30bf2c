// The fuse pass: user-written composites run the composite's fused kernel, elementwise chains run
// as one fused_elementwise step; results equal the composite ops bitwise and incremental reads
// stay bitwise equal to fresh ones.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "engine/ops.h"
#include "engine/session.h"

using namespace tessera;

namespace {

std::vector<float> values(int64_t n, float scale, int offset = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int64_t>((i * 7 + offset) % 13) - 6);
  return v;
}

// Reads every output of `g` in full after writing each input with values(); the session is
// handed to `keep` when given.
std::vector<std::vector<float>> run(const Graph& g, SessionOptions options = {},
                                    std::unique_ptr<GraphSession>* keep = nullptr) {
  auto session = std::make_unique<GraphSession>(g, options);
  int k = 0;
  for (NodeId id : g.inputs()) session->write(g.node(id).attrs_as<InputAttrs>().name, Box::full(g.node(id).shape),
                                              values(g.node(id).volume(), 0.25f, k++));
  std::vector<std::vector<float>> out;
  for (const auto& [name, id] : g.outputs()) out.push_back(session->read<float>(name, Box::full(g.node(id).shape)));
  if (keep != nullptr) *keep = std::move(session);
  return out;
}

}  // namespace

TEST_CASE("planner: a user-written softmax and rms_norm run the fused kernels, bitwise as the composites") {
  const float eps = 1.0f / 1024;  // exactly representable: the composite and the scalar agree
  Graph hand, composite;
  for (Graph* g : {&hand, &composite}) {
    Tensor x = g->input("x", {5, 33}, DType::F32);
    Tensor w = g->input("w", {33}, DType::F32);
    if (g == &hand) {
      Tensor shifted = x - max(x, {1}, true);
      Tensor e = exp(shifted);
      g->output("softmax", e / sum(e, {1}, true));
      g->output("rms", x * rsqrt(mean(x * x, {-1}, true) + g->scalar(eps)) * w);
      g->output("log_softmax", shifted - log(sum(e, {1}, true)));
    } else {
      g->output("softmax", softmax(x, 1));
      g->output("rms", rms_norm(x, w, eps));
      g->output("log_softmax", log_softmax(x, 1));
    }
  }
  std::unique_ptr<GraphSession> s;
  std::vector<std::vector<float>> got = run(hand, {}, &s);
  CHECK(s->stats().fused_patterns == 3);
  const std::string plan = s->last_plan();
  CHECK(plan.find("softmax") != std::string::npos);
  CHECK(run(hand, {}, &s) == run(composite));
  // The dump of the reads shows the fused ops, and the unfused graph computes the same values.
  GraphSession unfused(hand, SessionOptions{.fuse = false});
  CHECK(unfused.stats().fused_patterns == 0);
  s->write("x", Box{{2, 3}, {0, 33}}, std::vector<float>(33, 0.5f));
  std::vector<float> row = s->read<float>("rms", Box{{0, 5}, {0, 33}});
  CHECK(s->last_plan().find("rmsnorm") != std::string::npos);
  CHECK(s->stats().elements_computed == 33);  // one row of the fused rms_norm, nothing else
}

TEST_CASE("planner: user-written silu, gelu, sigmoid and layer_norm are recognised") {
  Graph hand, composite;
  for (Graph* g : {&hand, &composite}) {
    Tensor x = g->input("x", {4, 17}, DType::F32);
    Tensor w = g->input("w", {17}, DType::F32);
    Tensor b = g->input("b", {17}, DType::F32);
    const bool h = g == &hand;
    auto c = [&](double v) { return g->scalar(static_cast<float>(v)); };
    g->output("silu", h ? x * sigmoid(x) : silu(x));
    g->output("gelu", h ? c(0.5) * x * (c(1.0) + tanh(c(std::sqrt(2.0 / M_PI)) * (x + c(0.044715) * pow(x, c(3.0)))))
                        : gelu(x, true));
    g->output("sigmoid", h ? c(1.0) / (c(1.0) + exp(neg(x))) : sigmoid(x));
    const float eps = 1.0f / 256;
    Tensor xc = x - mean(x, {-1}, true);
    g->output("layer_norm", h ? xc * rsqrt(mean(xc * xc, {-1}, true) + c(eps)) * w + b : layer_norm(x, w, b, eps));
  }
  std::unique_ptr<GraphSession> s;
  std::vector<std::vector<float>> got = run(hand, {}, &s);
  CHECK(s->stats().fused_patterns == 4);
  CHECK(got == run(composite));
}

TEST_CASE("planner: a user-written causal GQA attention runs the attention op and its exact rule") {
  const int64_t T = 9, Hq = 4, Hkv = 2, D = 8;
  for (int64_t window : {0, 3}) {
    CAPTURE(window);
    AttentionParams p;
    p.scale = 0.25;
    p.window = window;
    p.softcap = window > 0 ? 20.0 : 0.0;
    Graph hand, composite;
    for (Graph* g : {&hand, &composite}) {
      Tensor q = g->input("q", {T, Hq, D}, DType::F32);
      Tensor k = g->input("k", {T, Hkv, D}, DType::F32);
      Tensor v = g->input("v", {T, Hkv, D}, DType::F32);
      if (g == &composite) {
        g->output("out", attention(q, k, v, p));
        continue;
      }
      // The way a PyTorch user writes it: heads first, repeat K/V, scores, cap, mask, softmax.
      auto heads = [](Tensor t) { return permute(t, {1, 0, 2}); };
      auto repeat_kv = [&](Tensor t) {
        return reshape(expand(reshape(t, {Hkv, 1, T, D}), {Hkv, Hq / Hkv, T, D}), {Hq, T, D});
      };
      Tensor qh = heads(q), kh = repeat_kv(heads(k)), vh = repeat_kv(heads(v));
      Tensor scores = matmul(qh, transpose(kh, -1, -2)) * g->scalar(static_cast<float>(p.scale));
      if (p.softcap > 0) {
        Tensor cap = g->scalar(static_cast<float>(p.softcap));
        scores = cap * tanh(scores / cap);
      }
      Tensor rows = reshape(arange(*g, T, 0, 1, DType::I64), {T, 1});
      Tensor cols = arange(*g, T, 0, 1, DType::I64);
      Tensor visible = le(cols, rows);
      if (window > 0) visible = minimum(visible, gt(cols, rows - g->scalar(static_cast<float>(window), DType::I64)));
      scores = where(visible, scores, g->scalar(-INFINITY));
      Tensor e = exp(scores - max(scores, {-1}, true));
      g->output("out", permute(matmul(e / sum(e, {-1}, true), vh), {1, 0, 2}));
    }
    std::unique_ptr<GraphSession> s;
    std::vector<std::vector<float>> got = run(hand, {}, &s);
    CHECK(s->stats().fused_patterns == 1);  // the attention, its written-out softmax included
    CHECK(got == run(composite));
    // The causal rule: a new key at row 6 dirties output rows >= 6 only.
    s->write("k", Box{{6, 7}, {0, Hkv}, {0, D}}, std::vector<float>(Hkv * D, 1.f));
    s->read<float>("out", Box{{0, T}, {0, Hq}, {0, D}});
    CHECK(s->stats().elements_computed <= (T - 6) * Hq * D + Hkv * D * 4);
    GraphSession fresh(hand);
    fresh.write("q", Box{{0, T}, {0, Hq}, {0, D}}, values(T * Hq * D, 0.25f, 0));
    std::vector<float> k_values = values(T * Hkv * D, 0.25f, 1);
    std::fill(k_values.begin() + 6 * Hkv * D, k_values.begin() + 7 * Hkv * D, 1.f);
    fresh.write("k", Box{{0, T}, {0, Hkv}, {0, D}}, k_values);
    fresh.write("v", Box{{0, T}, {0, Hkv}, {0, D}}, values(T * Hkv * D, 0.25f, 2));
    CHECK(fresh.read<float>("out", Box{{0, T}, {0, Hq}, {0, D}}) == s->read<float>("out", Box{{0, T}, {0, Hq}, {0, D}}));
  }
}

TEST_CASE(
    "planner: relu(conv), relu(conv + skip) and skip + conv fuse into conv2d's epilogue, bitwise as unfused and "
    "incremental exact, a conv with another reader does not") {
  Graph g;
  Tensor x = g.input("x", {1, 8, 9, 11}, DType::F32);
  Tensor w3 = g.input("w3", {8, 8, 3, 3}, DType::F32), w1 = g.input("w1", {8, 8, 1, 1}, DType::F32);
  Tensor b = g.input("b", {8}, DType::F32);
  const Conv2dParams pad{.pad_h = 1, .pad_w = 1};
  Tensor h = relu(conv2d(x, w3, b, pad));           // relu
  Tensor y = relu(conv2d(h, w3, Tensor{}, pad) + h);  // conv first, then relu
  Tensor z = h + conv2d(y, w1, b);                    // residual first, no relu
  Tensor shared = conv2d(z, w3, b, pad);              // read twice: stays a plain conv
  g.output("y", y);
  g.output("z", z);
  g.output("relu", relu(shared));
  g.output("twice", shared + shared);
  std::unique_ptr<GraphSession> s;
  const std::vector<std::vector<float>> fused = run(g, {}, &s);
  CHECK(s->stats().fused_patterns == 3);
  std::string plan;  // the steps of every output's first read
  {
    GraphSession plans(g);
    int k = 0;
    for (NodeId id : g.inputs())
      plans.write(g.node(id).attrs_as<InputAttrs>().name, Box::full(g.node(id).shape), values(g.node(id).volume(), 0.25f, k++));
    for (const auto& [name, id] : g.outputs()) {
      plans.read<float>(name, Box::full(g.node(id).shape));
      plan += plans.last_plan();
    }
  }
  CHECK(plan.find("conv2d{stride=1x1,pad=1x1,groups=1,relu}") != std::string::npos);
  CHECK(plan.find("conv2d{stride=1x1,pad=1x1,groups=1,+residual,relu}") != std::string::npos);
  CHECK(plan.find("conv2d{stride=1x1,pad=0x0,groups=1,residual+}") != std::string::npos);
  CHECK(plan.find("conv2d{stride=1x1,pad=1x1,groups=1}") != std::string::npos);
  CHECK(fused == run(g, SessionOptions{.fuse = false}));
  // An edit recomputes the receptive field only, bitwise equal to a fresh session given it at once.
  std::vector<float> patch(8 * 2 * 3, 0.75f);
  s->write("x", Box{{0, 1}, {0, 8}, {4, 6}, {1, 4}}, patch);
  std::unique_ptr<GraphSession> fresh;
  run(g, {}, &fresh);
  fresh->write("x", Box{{0, 1}, {0, 8}, {4, 6}, {1, 4}}, patch);
  for (const auto& [name, id] : g.outputs()) {
    CAPTURE(name);
    CHECK(s->read<float>(name, Box::full(g.node(id).shape)) == fresh->read<float>(name, Box::full(g.node(id).shape)));
  }
}

TEST_CASE("planner: a near miss is not fused and computes what was written") {
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  Tensor e = exp(x - max(x, {1}, true));
  g.output("y", e / sum(e, {0}, true));  // normalised over the other axis: not a softmax
  std::unique_ptr<GraphSession> s;
  std::vector<std::vector<float>> got = run(g, {}, &s);
  CHECK(s->stats().fused_patterns == 0);
  CHECK(got == run(g, SessionOptions{.fuse = false}));
}

TEST_CASE("planner: elementwise chains run as one fused step, bitwise as unfused, incremental exact") {
  Graph g;
  Tensor a = g.input("a", {37, 70}, DType::F32);
  Tensor b = g.input("b", {70}, DType::F32);
  Tensor c = g.input("c", {37, 1}, DType::F32);
  Tensor shared = a * b;                      // read twice: stays its own node
  Tensor chain = tanh(shared + c) * a - exp(neg(shared));
  Tensor other = sqrt(abs(shared)) + c;
  g.output("chain", chain);
  g.output("other", other);
  std::unique_ptr<GraphSession> s;
  std::vector<std::vector<float>> fused = run(g, {}, &s);
  CHECK(s->stats().fused_chains == 2);
  CHECK(fused == run(g, SessionOptions{.fuse = false}));
  CHECK(s->is_fused_away(exp(neg(shared)).id));  // hash-consed: the node of the chain, absorbed
  CHECK_FALSE(s->is_fused_away(shared.id));       // read twice: its own node
  // One row of `a` changes: one row of each fused step.
  s->write("a", Box{{5, 6}, {0, 70}}, std::vector<float>(70, 0.75f));
  std::vector<float> row = s->read<float>("chain", Box{{0, 37}, {0, 70}});
  CHECK(s->last_plan().find("fused_elementwise") != std::string::npos);
  CHECK(s->stats().elements_computed == 2 * 70);  // shared's row and the chain's row
  GraphSession fresh(g);
  fresh.write("a", Box{{0, 37}, {0, 70}}, [] {
    std::vector<float> v = values(37 * 70, 0.25f, 0);
    std::fill(v.begin() + 5 * 70, v.begin() + 6 * 70, 0.75f);
    return v;
  }());
  fresh.write("b", Box{{0, 70}}, values(70, 0.25f, 1));
  fresh.write("c", Box{{0, 37}, {0, 1}}, values(37, 0.25f, 2));
  CHECK(fresh.read<float>("chain", Box{{0, 37}, {0, 70}}) == row);
}

TEST_CASE("planner: pinned nodes are never absorbed, and pinning a fused-away node is an Error") {
  Graph g;
  Tensor a = g.input("a", {8}, DType::F32);
  Tensor inner = exp(a);
  g.output("y", inner * a + a);
  GraphSession fused(g);
  CHECK(fused.is_fused_away(inner.id));
  CHECK_THROWS_AS(fused.set_keep(inner.id, Keep::Always), Error);
  fused.set_keep(inner.id, Keep::Never);  // harmless
  GraphSession pinned(g, SessionOptions{.keep_always = {inner.id}});
  CHECK_FALSE(pinned.is_fused_away(inner.id));
  pinned.write("a", Box{{0, 8}}, values(8, 0.5f));
  pinned.read<float>("y", Box{{0, 8}});
  CHECK(pinned.is_kept(inner.id));
  CHECK(pinned.valid_region(inner.id) == Region(Box{{0, 8}}));
  CHECK_THROWS_AS(GraphSession(g, SessionOptions{.keep_always = {99}}), Error);
}
