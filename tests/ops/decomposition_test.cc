// Decompositions of the composite ops (OpDef::decompose): for every composite, on small odd
// shapes and several attribute values,
// - values: the composite equals its decomposition within kernel tolerance, on the reference
//   and the CPU backend (two graphs: the decomposition is built from the composite's node into
//   a graph of its own);
// - rules: the composite's rules are at least as tight as what region analysis derives through
//   the decomposition (forward of one-element and small-box dirt of each input is inside the
//   dirt propagate_dirt derives; the needed box of each input is inside the bounding box of what
//   plan_read asks of it), and strictly tighter for causal attention.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/session.h"
#include "planner/region_analysis.h"
#include "tests/support/op_harness.h"

using namespace tessera;
using tessera::testing::ValueRange;

namespace {

struct DecompositionCase {
  std::string label;
  // Builds the composite over graph inputs (g.input) and returns it.
  std::function<Tensor(Graph&)> build;
  // Value range per graph input, in g.inputs() order; missing entries use [-2, 2].
  std::vector<ValueRange> ranges = {};
  double tolerance = 1e-5;  // |composite - decomposition| <= tolerance * (1 + |composite|)
};

ValueRange range_of(const DecompositionCase& c, size_t input) {
  return input < c.ranges.size() ? c.ranges[input] : ValueRange{};
}

// The composite's inputs as tensors of `g`, whose graph inputs mirror those of `source`.
std::vector<Tensor> mirrored_inputs(const Graph& source, const Node& node, Graph& g) {
  std::vector<Tensor> inputs;
  for (NodeId id : node.inputs) {
    size_t i = 0;
    while (i < source.inputs().size() && source.inputs()[i] != id) ++i;
    REQUIRE_MESSAGE(i < source.inputs().size(), "composite inputs must be graph inputs");
    inputs.push_back(Tensor{&g, g.inputs()[i]});
  }
  return inputs;
}

// Random values for every graph input, written to both sessions.
void write_inputs(const DecompositionCase& c, const Graph& g, std::mt19937_64& rng, GraphSession& a,
                  GraphSession& b) {
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    const std::string& name = n.attrs_as<InputAttrs>().name;
    const ValueRange r = range_of(c, i);
    const Box full = Box::full(n.shape);
    const auto count = static_cast<size_t>(n.volume());
    if (n.dtype == DType::F32) {
      std::uniform_real_distribution<float> u(static_cast<float>(r.lo), static_cast<float>(r.hi));
      std::vector<float> values(count);
      for (float& v : values) v = u(rng);
      a.write(name, full, values);
      b.write(name, full, values);
    } else if (n.dtype == DType::F16 || n.dtype == DType::BF16) {
      std::uniform_real_distribution<float> u(static_cast<float>(r.lo), static_cast<float>(r.hi));
      std::vector<uint16_t> values(count);
      for (uint16_t& v : values) v = n.dtype == DType::F16 ? float_to_half(u(rng)) : float_to_bf16(u(rng));
      a.write(name, full, std::as_bytes(std::span<const uint16_t>(values)));
      b.write(name, full, std::as_bytes(std::span<const uint16_t>(values)));
    } else {
      REQUIRE(n.dtype == DType::I32);
      std::uniform_int_distribution<int32_t> u(static_cast<int32_t>(r.lo),
                                               static_cast<int32_t>(r.hi));
      std::vector<int32_t> values(count);
      for (int32_t& v : values) v = u(rng);
      a.write(name, full, values);
      b.write(name, full, values);
    }
  }
}

void check_values(const DecompositionCase& c, BackendKind backend, uint64_t seed) {
  CAPTURE(c.label);
  CAPTURE(seed);
  Graph composite_graph;
  const Tensor composite = c.build(composite_graph);
  composite_graph.output("out", composite);
  Graph decomposed_graph;
  for (NodeId id : composite_graph.inputs()) {
    const Node& n = composite_graph.node(id);
    decomposed_graph.input(n.attrs_as<InputAttrs>().name, n.shape, n.dtype);
  }
  const Tensor decomposed = decompose(
      composite.node(), mirrored_inputs(composite_graph, composite.node(), decomposed_graph));
  REQUIRE(decomposed.graph == &decomposed_graph);
  decomposed_graph.output("out", decomposed);
  GraphSession a(composite_graph, SessionOptions{.backend = backend});
  GraphSession b(decomposed_graph, SessionOptions{.backend = backend});
  std::mt19937_64 rng(seed);
  write_inputs(c, composite_graph, rng, a, b);
  const Box full = Box::full(composite.shape());
  const std::vector<float> want = a.read<float>("out", full);
  const std::vector<float> got = b.read<float>("out", full);
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = c.tolerance * (1.0 + std::fabs(want[i]));
    if (!(std::fabs(static_cast<double>(want[i]) - got[i]) <= bound))
      FAIL("element ", i, ": composite ", want[i], ", decomposition ", got[i]);
  }
}

// A graph holding the composite and its decomposition over the same graph inputs.
struct SideBySide {
  Graph g;
  Tensor composite;
  Node node;  // a copy of the composite's node
  Tensor decomposed;

  explicit SideBySide(const DecompositionCase& c) {
    composite = c.build(g);
    node = composite.node();
    std::vector<Tensor> inputs;
    for (NodeId id : node.inputs) inputs.push_back(Tensor{&g, id});
    decomposed = decompose(node, inputs);
    REQUIRE(decomposed.graph == &g);
  }

  // The composite's forward of `dirty` in graph input `input`.
  Region forward(NodeId input, const Box& dirty) const {
    Region out(node.rank());
    for (size_t k = 0; k < node.inputs.size(); ++k)
      if (node.inputs[k] == input)
        op_def(node.kind).forward(g, node, static_cast<int>(k), dirty, out);
    return out;
  }

  // Dirt region analysis derives for the decomposition's result.
  Region derived_forward(NodeId input, const Box& dirty) const {
    return propagate_dirt(g, input, dirty)[static_cast<size_t>(decomposed.id)];
  }

  // The composite's needed box per op input for output box `out`.
  std::vector<Box> needed(const Box& out) const {
    std::vector<Box> boxes(node.inputs.size(), Box::of_rank(0));
    op_def(node.kind).needed(g, node, out, boxes);
    return boxes;
  }

  // What reading `out` of the decomposition needs of each op input, from a state where only
  // inputs and constants are valid.
  std::vector<Region> derived_needed(const Box& out) const {
    std::vector<Region> valid;
    std::vector<uint8_t> fixed;
    for (NodeId id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      const bool source = n.kind == OpKind::Input || n.kind == OpKind::Constant;
      valid.push_back(source ? Region::full(n.shape) : Region(n.rank()));
      fixed.push_back(source ? 1 : 0);
    }
    ReadState state{.valid = valid, .fixed = fixed, .max_boxes = 1 << 20};
    ReadScratch scratch;
    std::vector<Step> steps;
    std::vector<NeedEntry> explain;
    plan_read(g, decomposed.id, out, state, scratch, steps, nullptr, &explain);
    std::vector<Region> result;
    for (NodeId id : node.inputs) {
      Region want(g.node(id).rank());
      for (const NeedEntry& e : explain)
        if (e.node == id) want = e.want;
      result.push_back(want);
    }
    return result;
  }
};

// One-element boxes of `shape` (all of them, or a random sample of `limit`), then `extra`
// random boxes.
std::vector<Box> probe_boxes(const Shape& shape, std::mt19937_64& rng, int64_t limit = 256,
                             int extra = 8) {
  std::vector<Box> boxes;
  const int64_t volume = shape_volume(shape);
  ref::for_each_index(Box::full(shape), [&](const int64_t* i) {
    if (volume > limit && static_cast<int64_t>(rng() % static_cast<uint64_t>(volume)) >= limit)
      return;
    Box b = Box::of_rank(static_cast<int>(shape.size()));
    for (int d = 0; d < b.rank(); ++d) b[d] = Interval(i[d], i[d] + 1);
    boxes.push_back(b);
  });
  for (int i = 0; i < extra && volume > 0; ++i) boxes.push_back(testing::random_box(shape, rng));
  return boxes;
}

void check_rules_no_looser(const DecompositionCase& c, uint64_t seed) {
  CAPTURE(c.label);
  CAPTURE(seed);
  SideBySide s(c);
  std::mt19937_64 rng(seed);
  for (NodeId input : s.g.inputs()) {
    const Shape shape = s.g.node(input).shape;
    for (const Box& dirty : probe_boxes(shape, rng)) {
      const Region own = s.forward(input, dirty);
      const Region derived = s.derived_forward(input, dirty);
      if (!derived.contains(own))
        FAIL("input ", s.g.node(input).attrs_as<InputAttrs>().name, " dirty ", dirty.to_string(),
             ": forward ", own.to_string(), " exceeds the derived ", derived.to_string());
    }
  }
  for (const Box& out : probe_boxes(s.node.shape, rng)) {
    const std::vector<Box> own = s.needed(out);
    const std::vector<Region> derived = s.derived_needed(out);
    // needed gives one box per input (OpDef), so it is compared with the bounding box of the
    // derived need: half-split rope's column c needs c and c + n_rot / 2, a region of two
    // boxes through the decomposition, their hull through the op's rule.
    for (size_t k = 0; k < own.size(); ++k)
      if (!own[k].empty() && !Region(derived[k].bounding_box()).contains(own[k]))
        FAIL("output box ", out.to_string(), ": needed of input ", k, " ", own[k].to_string(),
             " exceeds the derived ", derived[k].to_string());
  }
}

Tensor f32(Graph& g, const char* name, const Shape& shape) {
  return g.input(name, shape, DType::F32);
}

const ValueRange kPositions{0, 20};

std::vector<DecompositionCase> composite_cases() {
  std::vector<DecompositionCase> cases;
  // softmax / log_softmax
  for (bool log : {false, true})
    for (int64_t axis : {-1, 0, 1}) {
      cases.push_back(
          {std::string(log ? "log_softmax" : "softmax") + " axis " + std::to_string(axis),
           [=](Graph& g) {
             Tensor x = f32(g, "x", {3, 5, 7});
             return log ? log_softmax(x, axis) : softmax(x, axis);
           },
           {ValueRange{-6, 6}}});
    }
  // rms_norm
  for (double eps : {1e-6, 0.25}) {
    cases.push_back({"rms_norm weight eps " + std::to_string(eps), [=](Graph& g) {
                       return rms_norm(f32(g, "x", {3, 7}), f32(g, "w", {7}), eps);
                     }});
    cases.push_back({"rms_norm no weight eps " + std::to_string(eps), [=](Graph& g) {
                       return rms_norm(f32(g, "x", {2, 3, 5}), Tensor{}, eps);
                     }});
  }
  // layer_norm: every combination of weight and bias
  for (int params = 0; params < 4; ++params)
    cases.push_back({"layer_norm params " + std::to_string(params), [=](Graph& g) {
                       Tensor x = f32(g, "x", {2, 3, 7});
                       Tensor w = params & 1 ? f32(g, "w", {7}) : Tensor{};
                       Tensor b = params & 2 ? f32(g, "b", {7}) : Tensor{};
                       return layer_norm(x, w, b, params == 3 ? 0.5 : 1e-5);
                     }});
  // group_norm
  cases.push_back(
      {"group_norm 3 groups, weight and bias", [](Graph& g) {
         return group_norm(f32(g, "x", {2, 6, 3, 5}), 3, f32(g, "w", {6}), f32(g, "b", {6}), 1e-5);
       }});
  cases.push_back({"group_norm 1 group, no params", [](Graph& g) {
                     return group_norm(f32(g, "x", {1, 4, 3, 3}), 1, Tensor{}, Tensor{}, 0.1);
                   }});
  cases.push_back({"group_norm 6 groups, weight", [](Graph& g) {
                     return group_norm(f32(g, "x", {2, 6, 5}), 6, f32(g, "w", {6}), Tensor{}, 1e-6);
                   }});
  cases.push_back({"group_norm rank 2, bias", [](Graph& g) {
                     return group_norm(f32(g, "x", {3, 4}), 2, Tensor{}, f32(g, "b", {4}), 1e-5);
                   }});
  // rope
  cases.push_back({"rope half split, all dims",
                   [](Graph& g) {
                     return rope(f32(g, "x", {5, 3, 8}), g.input("pos", {5}, DType::I32), 8,
                                 10000.0, RopeMode::HalfSplit);
                   },
                   {ValueRange{}, kPositions}});
  cases.push_back({"rope interleaved, partial, base 500",
                   [](Graph& g) {
                     return rope(f32(g, "x", {5, 3, 10}), g.input("pos", {5}, DType::I32), 6, 500.0,
                                 RopeMode::Interleaved);
                   },
                   {ValueRange{}, kPositions}});
  cases.push_back({"rope half split, partial, freq_scale 0.5, leading dim",
                   [](Graph& g) {
                     return rope(f32(g, "x", {2, 5, 3, 6}), g.input("pos", {5}, DType::I32), 4,
                                 10000.0, RopeMode::HalfSplit, 0.5);
                   },
                   {ValueRange{}, kPositions}});
  // rope_multi
  cases.push_back({"rope_multi 3 axes, pass-through",
                   [](Graph& g) {
                     return rope_multi(f32(g, "x", {5, 3, 14}), g.input("pos", {5, 3}, DType::I32),
                                       {4, 4, 2}, 10000.0);
                   },
                   {ValueRange{}, kPositions}});
  cases.push_back({"rope_multi 1 axis, all dims, leading dim",
                   [](Graph& g) {
                     return rope_multi(f32(g, "x", {2, 3, 1, 6}),
                                       g.input("pos", {3, 1}, DType::I32), {6}, 1000.0);
                   },
                   {ValueRange{}, kPositions}});
  // upsample
  for (int64_t scale : {1, 2, 3})
    cases.push_back({"upsample scale " + std::to_string(scale), [=](Graph& g) {
                       return upsample_nearest(f32(g, "x", {2, 3, 5}), scale);
                     }});
  cases.push_back({"upsample rank 7", [](Graph& g) {
                     return upsample_nearest(f32(g, "x", {1, 2, 1, 1, 1, 3, 2}), 2);
                   }});
  // attention
  struct AttentionShape {
    const char* label;
    Shape q, k, v;
    AttentionParams params;
  };
  const AttentionShape attention_shapes[] = {
      {"causal GQA", {1, 5, 4, 3}, {1, 5, 2, 3}, {1, 5, 2, 2}, {.scale = 0.5, .causal = true}},
      {"causal window 2 softcap 5",
       {5, 2, 3},
       {5, 2, 3},
       {5, 2, 3},
       {.scale = 0.7, .causal = true, .window = 2, .softcap = 5.0}},
      {"non-causal T 3 S 5",
       {2, 3, 2, 3},
       {2, 5, 2, 3},
       {2, 5, 2, 4},
       {.scale = 1.0, .causal = false}},
      {"causal MQA softcap 1",
       {2, 4, 3, 2},
       {2, 4, 1, 2},
       {2, 4, 1, 3},
       {.scale = 0.3, .causal = true, .softcap = 1.0}},
  };
  for (const AttentionShape& a : attention_shapes)
    cases.push_back({std::string("attention ") + a.label, [a](Graph& g) {
                       return attention(f32(g, "q", a.q), f32(g, "k", a.k), f32(g, "v", a.v),
                                        a.params);
                     }});
  // a half K/V cache under an f32 q (the decomposition casts k and v to f32)
  for (DType kv : {DType::F16, DType::BF16})
    cases.push_back({std::string("attention causal GQA ") + dtype_name(kv) + " k/v", [kv](Graph& g) {
                       return attention(f32(g, "q", {1, 5, 4, 3}), g.input("k", {1, 5, 2, 3}, kv),
                                        g.input("v", {1, 5, 2, 2}, kv), {.scale = 0.5, .causal = true});
                     }});
  // linear (float weights)
  cases.push_back({"linear [3, 5] x [4, 5]", [](Graph& g) {
                     return linear(f32(g, "x", {3, 5}), f32(g, "w", {4, 5}));
                   }});
  cases.push_back({"linear [2, 3, 5] x [7, 5]", [](Graph& g) {
                     return linear(f32(g, "x", {2, 3, 5}), f32(g, "w", {7, 5}));
                   }});
  cases.push_back({"linear rank 1", [](Graph& g) {
                     return linear(f32(g, "x", {5}), f32(g, "w", {3, 5}));
                   }});
  // conv2d's epilogue: relu, a residual added in either order, both, with and without bias
  for (ConvResidual order : {ConvResidual::None, ConvResidual::ConvFirst, ConvResidual::ResidualFirst})
    for (bool relu : {false, true}) {
      if (order == ConvResidual::None && !relu) continue;
      cases.push_back({absl::StrCat("conv2d epilogue residual ", static_cast<int>(order), " relu ", relu), [=](Graph& g) {
                         Conv2dParams p{.stride_h = 1, .stride_w = 2, .pad_h = 1, .pad_w = 1};
                         p.residual = order;
                         p.relu = relu;
                         Tensor x = f32(g, "x", {2, 3, 7, 8}), w = f32(g, "w", {4, 3, 3, 3});
                         Tensor b = order == ConvResidual::ResidualFirst ? Tensor{} : f32(g, "b", {4});
                         if (order == ConvResidual::None) return conv2d(x, w, b, p);
                         return conv2d(x, w, b, f32(g, "r", {2, 4, 7, 4}), p);
                       }});
    }
  // composite unary functions
  for (UnaryFn fn : {UnaryFn::Sigmoid, UnaryFn::Silu, UnaryFn::GeluTanh, UnaryFn::GeluErf})
    cases.push_back({"unary " + std::string(fn_name(fn)),
                     [=](Graph& g) {
                       return unary(fn, f32(g, "x", {3, 7}));
                     },
                     {ValueRange{-6, 6}}});
  return cases;
}

}  // namespace

TEST_CASE("ops: decompositions equal their composites on the reference and CPU backends") {
  uint64_t seed = 100;
  for (const DecompositionCase& c : composite_cases()) {
    check_values(c, BackendKind::Reference, seed);
    check_values(c, BackendKind::Cpu, seed);
    ++seed;
  }
}

TEST_CASE("ops: composite rules are at least as tight as those derived through decompositions") {
  uint64_t seed = 200;
  for (const DecompositionCase& c : composite_cases()) check_rules_no_looser(c, seed++);
}

TEST_CASE("ops: causal attention rules are strictly tighter than its decomposition's") {
  for (int64_t window : {0, 2}) {
    CAPTURE(window);
    const int64_t t = 6;
    SideBySide s(DecompositionCase{
        "causal", [=](Graph& g) {
          return attention(f32(g, "q", {t, 4, 3}), f32(g, "k", {t, 2, 3}), f32(g, "v", {t, 2, 2}),
                           {.scale = 0.5, .causal = true, .window = window});
        }});
    const NodeId k = s.g.inputs()[1];
    for (int64_t row = 1; row < t; ++row) {
      CAPTURE(row);
      const Box dirty{{row, row + 1}, {1, 2}, {0, 1}};  // one element of key row `row`
      const Region own = s.forward(k, dirty);
      const Region derived = s.derived_forward(k, dirty);
      CHECK(derived.contains(own));
      // The composite leaves the earlier query rows clean; the decomposition dirties them all.
      const Box earlier{{0, row}, {2, 4}, {0, 2}};  // the query heads of kv head 1
      CHECK_FALSE(own.intersects(earlier));
      CHECK(derived.contains(earlier));
      if (window > 0) CHECK_FALSE(own.intersects(Box{{row + window, t}, {0, 4}, {0, 2}}));
    }
    // Reading query row r needs key rows up to r (within the window) of the composite, every
    // key row of the decomposition.
    for (int64_t row = 0; row + 1 < t; ++row) {
      const Box out{{row, row + 1}, {0, 4}, {0, 2}};
      const std::vector<Box> own = s.needed(out);
      const std::vector<Region> derived = s.derived_needed(out);
      CHECK(own[1][0].end == row + 1);
      CHECK(derived[1].contains(Box{{0, t}, {0, 2}, {0, 3}}));
    }
  }
}

TEST_CASE("ops: decompose is empty for primitives and quantised linear, and validates inputs") {
  Graph g;
  Tensor x = f32(g, "x", {3, 4});
  Tensor in[] = {x};
  // Primitive unary functions and primitive ops have no decomposition.
  for (UnaryFn fn : {UnaryFn::Exp, UnaryFn::Tanh, UnaryFn::Erf, UnaryFn::Rsqrt})
    CHECK(decompose(unary(fn, x).node(), in).graph == nullptr);
  CHECK(decompose(transpose(x, 0, 1).node(), in).graph == nullptr);
  // A quantised weight: dequantisation is not an op.
  std::vector<std::byte> blocks(static_cast<size_t>(dtype_bytes(DType::Q8_0, 2 * 32)));
  Tensor xq = f32(g, "xq", {3, 32});
  Tensor w = g.constant({2, 32}, DType::Q8_0, blocks);
  const int32_t before = g.size();
  Tensor pair[] = {xq, w};
  CHECK(decompose(linear(xq, w).node(), pair).graph == nullptr);
  CHECK(g.size() == before + 1);  // the linear node only
  // Arity is checked.
  Tensor two[] = {x, x};
  CHECK_THROWS_WITH_AS(decompose(softmax(x).node(), two), doctest::Contains("inputs"), Error);
}
