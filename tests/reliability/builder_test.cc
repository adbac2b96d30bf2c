// Builders given bad tensor arguments, and builders that fail part-way: every one is an Error
// naming the argument, and the graph is left exactly as it was (so sessions created on it keep
// running, with every value they held).
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "engine/graph.h"
#include "engine/op_def.h"
#include "engine/ops.h"
#include "engine/session.h"

namespace tessera {
namespace {

struct Fixture {
  Graph g;
  Tensor x = g.input("x", {2, 3, 4, 4}, DType::F32);   // NCHW, also [..., T, H, D]
  Tensor m = g.input("m", {4, 4}, DType::F32);
  Tensor mi = g.input("mi", {4, 4}, DType::I32);
  Tensor cmp = gt(m, m);  // built before any session: the where cases below reuse it
  Tensor ids = g.input("ids", {2}, DType::I32);
  Tensor pos = g.input("pos", {4}, DType::I32);
  Tensor pos2 = g.input("pos2", {4, 2}, DType::I32);
  Tensor w = g.input("w", {4}, DType::F32);
  Tensor cw = g.input("cw", {5, 3, 3, 3}, DType::F32);
  Fixture() { g.output("y", sum(m * m, {1})); }
};

// A builder call with `bad` in place of one named tensor argument.
struct Case {
  const char* op;
  const char* argument;
  std::function<void(Fixture&, Tensor bad)> build;
  // More than one tensor argument: only then is a tensor of another graph an error (a unary
  // builder given one simply builds on that graph).
  bool several() const {
    static const std::vector<std::string> single = {"unary", "cast", "reduce", "cumsum", "softmax", "triangle",
                                                    "reshape", "permute", "transpose", "slice", "pad", "repeat",
                                                    "flip", "expand", "split", "fused_elementwise", "pool2d",
                                                    "upsample"};
    return std::find(single.begin(), single.end(), op) == single.end();
  }
};

std::vector<Case> cases() {
  using F = Fixture;
  return {
      {"unary", "x", [](F&, Tensor b) { exp(b); }},
      {"binary", "a", [](F& f, Tensor b) { b + f.m; }},
      {"binary", "b", [](F& f, Tensor b) { f.m * b; }},
      {"where", "cond", [](F& f, Tensor b) { where(b, f.m, f.m); }},
      {"where", "a", [](F& f, Tensor b) { where(gt(f.m, f.m), b, f.m); }},
      {"where", "b", [](F& f, Tensor b) { where(gt(f.m, f.m), f.m, b); }},
      {"cast", "x", [](F&, Tensor b) { cast(b, DType::F16); }},
      {"reduce", "x", [](F&, Tensor b) { sum(b, {0}); }},
      {"reduce", "x", [](F&, Tensor b) { argmax(b, 0); }},
      {"cumsum", "x", [](F&, Tensor b) { cumsum(b, 0); }},
      {"softmax", "x", [](F&, Tensor b) { softmax(b); }},
      {"matmul", "a", [](F& f, Tensor b) { matmul(b, f.m); }},
      {"matmul", "b", [](F& f, Tensor b) { matmul(f.m, b); }},
      {"linear", "x", [](F& f, Tensor b) { linear(b, f.m); }},
      {"linear", "weight", [](F& f, Tensor b) { linear(f.m, b); }},
      {"gather", "table", [](F& f, Tensor b) { gather(b, f.ids); }},
      {"gather", "ids", [](F& f, Tensor b) { embedding(f.m, b); }},
      {"triangle", "x", [](F&, Tensor b) { triu(b); }},
      {"reshape", "x", [](F&, Tensor b) { reshape(b, {16}); }},
      {"permute", "x", [](F&, Tensor b) { permute(b, {1, 0}); }},
      {"transpose", "x", [](F&, Tensor b) { transpose(b, 0, 1); }},
      {"slice", "x", [](F&, Tensor b) { slice(b, 0, 0, 1); }},
      {"pad", "x", [](F&, Tensor b) { pad(b, {1, 1}, {1, 1}); }},
      {"repeat", "x", [](F&, Tensor b) { repeat(b, {1, 2}); }},
      {"flip", "x", [](F&, Tensor b) { flip(b, {0}); }},
      {"expand", "x", [](F&, Tensor b) { expand(b, {4, 4}); }},
      {"split", "x", [](F&, Tensor b) { split(b, 0, {2, 2}); }},
      {"concat", "xs[1]", [](F& f, Tensor b) { const Tensor xs[] = {f.m, b}; concat(xs, 0); }},
      {"concat", "xs[0]", [](F& f, Tensor b) { const Tensor xs[] = {b, f.m}; concat(xs, 0); }},
      {"stack", "xs[1]", [](F& f, Tensor b) { const Tensor xs[] = {f.m, b}; stack(xs, 0); }},
      {"fused_elementwise", "inputs[0]",
       [](F&, Tensor b) {
         const Tensor in[] = {b};
         fused_elementwise(in, {FusedInstr{.kind = OpKind::Unary, .fn = static_cast<int64_t>(UnaryFn::Exp), .a = 0}});
       }},
      {"rmsnorm", "x", [](F& f, Tensor b) { rms_norm(b, f.w, 1e-5); }},
      {"rmsnorm", "weight", [](F& f, Tensor b) { rms_norm(f.m, b, 1e-5); }},
      {"layernorm", "bias", [](F& f, Tensor b) { layer_norm(f.m, f.w, b, 1e-5); }},
      {"groupnorm", "weight", [](F& f, Tensor b) { group_norm(f.x, 3, b, Tensor{}, 1e-5); }},
      {"rope", "x", [](F& f, Tensor b) { rope(b, f.pos, 4, 1e4, RopeMode::HalfSplit); }},
      {"rope", "positions", [](F& f, Tensor b) { rope(f.x, b, 4, 1e4, RopeMode::HalfSplit); }},
      {"rope_multi", "positions", [](F& f, Tensor b) { rope_multi(f.x, b, {2, 2}); }},
      {"attention", "q", [](F& f, Tensor b) { attention(b, f.x, f.x, AttentionParams{.causal = false}); }},
      {"attention", "k", [](F& f, Tensor b) { attention(f.x, b, f.x, AttentionParams{.causal = false}); }},
      {"attention", "v", [](F& f, Tensor b) { attention(f.x, f.x, b, AttentionParams{.causal = false}); }},
      {"conv2d", "x", [](F& f, Tensor b) { conv2d(b, f.cw, Tensor{}); }},
      {"conv2d", "weight", [](F& f, Tensor b) { conv2d(f.x, b, Tensor{}); }},
      {"conv2d", "bias", [](F& f, Tensor b) { conv2d(f.x, f.cw, b); }},
      {"conv2d", "residual", [](F& f, Tensor b) { conv2d(f.x, f.cw, Tensor{}, b, Conv2dParams{.pad_h = 1, .pad_w = 1}); }},
      {"pool2d", "x", [](F&, Tensor b) { pool2d(b, PoolKind::Max, 2, 2); }},
      {"upsample", "x", [](F&, Tensor b) { upsample_nearest(b, 2); }},
  };
}

TEST_CASE("reliability: every builder given a bad tensor argument names it in an Error") {
  Fixture f;
  Graph other;
  const Tensor foreign = other.input("o", {4, 4}, DType::F32);
  const int32_t size = f.g.size();
  for (const Case& c : cases()) {
    // Tensor{} (empty), ids that are not nodes of the graph, a tensor of another graph. Optional
    // arguments (a norm's weight and bias, a conv's bias) take Tensor{} as "absent", so for them
    // only the other three are errors.
    std::vector<std::pair<const char*, Tensor>> bads = {{"not a node", Tensor{&f.g, -1}},
                                                        {"not a node", Tensor{&f.g, 1 << 20}}};
    if (c.several()) bads.push_back({"different graphs", foreign});
    const std::string arg = c.argument;
    const bool optional = arg == "bias" || (arg == "weight" && std::string(c.op) != "linear" &&
                                            std::string(c.op) != "conv2d");
    if (!optional) bads.insert(bads.begin(), {"empty tensor", Tensor{}});
    for (const auto& entry : bads) {
      const char* what = entry.first;
      const Tensor bad = entry.second;
      CAPTURE(c.op);
      CAPTURE(c.argument);
      CAPTURE(what);
      try {
        c.build(f, bad);
        FAIL("no Error");
      } catch (const Error& e) {
        const std::string message = e.what();
        CHECK_MESSAGE(message.rfind(std::string("[") + c.op + "]", 0) == 0, message);
        CHECK_MESSAGE(message.find(std::string("'") + c.argument + "'") != std::string::npos, message);
        CHECK_MESSAGE(message.find(what) != std::string::npos, message);
      }
      CHECK(f.g.size() == size);
    }
  }
}

TEST_CASE("reliability: conv2d's epilogue rejects a bad residual and an epilogue without its input, as Errors") {
  Fixture f;
  const int32_t size = f.g.size();
  const Conv2dParams pad{.pad_h = 1, .pad_w = 1};
  const Tensor wrong_shape = f.g.input("r", {2, 5, 4, 3}, DType::F32), wrong_dtype = f.g.input("ri", {2, 5, 4, 4}, DType::I32);
  const int32_t inputs_added = f.g.size();
  CHECK_THROWS_WITH_AS(conv2d(f.x, f.cw, Tensor{}, wrong_shape, pad), doctest::Contains("residual must be f32 [2, 5, 4, 4]"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d(f.x, f.cw, Tensor{}, wrong_dtype, pad), doctest::Contains("residual must be"), Error);
  Conv2dParams order = pad;
  order.residual = ConvResidual::ResidualFirst;
  CHECK_THROWS_WITH_AS(conv2d(f.x, f.cw, Tensor{}, order), doctest::Contains("takes the residual tensor"), Error);
  const Tensor four[] = {f.x, f.cw, f.w, f.x};
  CHECK_THROWS_WITH_AS(f.g.add_node(four, pad), doctest::Contains("4 inputs need a residual epilogue"), Error);
  const Tensor two[] = {f.x, f.cw};
  CHECK_THROWS_WITH_AS(f.g.add_node(two, order), doctest::Contains("needs the residual as the last input"), Error);
  CHECK(f.g.size() == inputs_added);
  CHECK(inputs_added == size + 2);
  // The same graph still builds a valid epilogue.
  const Tensor r = f.g.input("r2", {2, 5, 4, 4}, DType::F32);
  const Tensor y = conv2d(f.x, f.cw, Tensor{}, r, order);
  CHECK(op_display_name(y.node()) == "conv2d{stride=1x1,pad=1x1,groups=1,residual+}");
}

TEST_CASE("reliability: Graph::add_node names the input that is not a node of the graph") {
  Fixture f;
  const Tensor in[] = {f.m, Tensor{}};
  CHECK_THROWS_WITH_AS(f.g.add_node(in, BinaryAttrs{BinaryFn::Add}), doctest::Contains("input 1"), Error);
  const Tensor in2[] = {Tensor{&f.g, 99}, f.m};
  CHECK_THROWS_WITH_AS(f.g.add_node(in2, BinaryAttrs{BinaryFn::Add}), doctest::Contains("input 0"), Error);
}

TEST_CASE("reliability: a builder that fails part-way leaves the graph and its sessions as they were") {
  Fixture f;
  GraphSession s(f.g);
  const std::vector<float> m = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  s.write("m", Box{{0, 4}, {0, 4}}, m);
  const std::vector<float> before = s.read<float>("y", Box{{0, 4}});
  const int32_t size = f.g.size();

  // stack reshapes each input, then concat rejects the mixed dtypes: the reshapes go again.
  const Tensor mixed[] = {f.m, f.mi};
  CHECK_THROWS_WITH_AS(stack(mixed, 0), doctest::Contains("[concat]"), Error);
  CHECK(f.g.size() == size);
  // A decomposition is checked against its node after it built its nodes.
  Graph scratch;
  Node node = scratch.node(softmax(scratch.input("m", {4, 4}, DType::F32)).id);
  node.shape = {4, 5};
  const Tensor inputs[] = {f.m};
  CHECK_THROWS_WITH_AS(decompose(node, inputs), doctest::Contains("decomposition gives"), Error);
  CHECK(f.g.size() == size);
  CHECK(s.read<float>("y", Box{{0, 4}}) == before);  // no "the graph has changed" Error

  // A caller's own scope.
  CHECK_THROWS_AS(([&] {
                    GraphRollback rollback(f.g);
                    Tensor t = f.m * f.m + f.g.scalar(2.5f);
                    f.g.output("t", t);
                    reshape(t, {5});  // throws
                  }()),
                  Error);
  CHECK(f.g.size() == size);
  CHECK(f.g.find_output("t") < 0);
  CHECK(s.read<float>("y", Box{{0, 4}}) == before);
  // The interning tables were rolled back with the nodes: the same node is added afresh, and
  // the nodes that were there before are still found.
  const NodeId y = f.g.find_output("y");
  CHECK(sum(f.m * f.m, {1}).id == y);
  CHECK(f.g.size() == size);
  CHECK((f.m + f.m).id == size);
  {
    GraphRollback kept(f.g);  // left normally: nothing is removed
    (void)(f.m - f.m);
  }
  CHECK(f.g.size() == size + 2);
}

TEST_CASE("reliability: sessions keep running after failed builders on their graph") {
  Fixture f;
  GraphSession s(f.g);
  const std::vector<float> m = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  s.write("m", Box{{0, 4}, {0, 4}}, m);
  const std::vector<float> before = s.read<float>("y", Box{{0, 4}});
  for (const Case& c : cases()) {
    CAPTURE(c.op);
    CHECK_THROWS_AS(c.build(f, Tensor{&f.g, -1}), Error);
  }
  const Tensor mixed[] = {f.m, f.mi};
  CHECK_THROWS_AS(stack(mixed, 0), Error);
  CHECK_THROWS_AS(split(f.m, 0, {2, 3}), Error);
  CHECK(s.read<float>("y", Box{{0, 4}}) == before);  // no "graph has changed" Error
  s.write("m", Box{{0, 1}, {0, 4}}, std::vector<float>{0, 0, 0, 0});
  CHECK(s.read<float>("y", Box{{0, 1}}) == std::vector<float>{0});
}

}  // namespace
}  // namespace tessera
