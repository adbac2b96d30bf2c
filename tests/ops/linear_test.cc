#include <doctest/doctest.h>

#include <cmath>

#include "engine/session.h"
#include "kernels/quant.h"
#include "tests/support/op_harness.h"
#include "tests/support/quant_blocks.h"
#include "tests/support/scoped_env.h"

using namespace tessera;
using tessera::testing::check_rules;
using tessera::testing::OpCase;

TEST_CASE("ops: linear rules and kernel with float weights") {
  check_rules(OpCase{"linear [5,7] x [3,7]", [](Graph& g) {
    Tensor x = g.input("x", {5, 7}, DType::F32);
    Tensor w = g.input("w", {3, 7}, DType::F32);
    return linear(x, w);
  }});
  check_rules(OpCase{"linear rank 3", [](Graph& g) {
    Tensor x = g.input("x", {2, 4, 6}, DType::F32);
    Tensor w = g.input("w", {5, 6}, DType::F32);
    return linear(x, w);
  }});
  check_rules(OpCase{"linear f16", [](Graph& g) {
    Tensor x = g.input("x", {3, 4}, DType::F16);
    Tensor w = g.input("w", {2, 4}, DType::F16);
    return linear(x, w);
  }});
}

TEST_CASE("ops: linear exact rules") {
  Graph g;
  Tensor x = g.input("x", {6, 4}, DType::F32);
  Tensor w = g.input("w", {3, 4}, DType::F32);
  Tensor y = linear(x, w);
  const OpDef& def = op_def(OpKind::Linear);
  Region r(2);
  def.forward(g, y.node(), 0, Box{{5, 6}, {1, 2}}, r);
  CHECK(r == Region(Box{{5, 6}, {0, 3}}));
  Region r2(2);
  def.forward(g, y.node(), 1, Box{{1, 2}, {0, 4}}, r2);
  CHECK(r2 == Region(Box{{0, 6}, {1, 2}}));
  std::array<Box, 2> in;
  def.needed(g, y.node(), Box{{2, 3}, {0, 2}}, in);
  CHECK(in[0] == Box{{2, 3}, {0, 4}});
  CHECK(in[1] == Box{{0, 2}, {0, 4}});
}

TEST_CASE("ops: linear and gather with quantised weights match dequantised float weights") {
  // f32 activations: the default int8 path rounds x (tests/kernels/linear_q8_test.cc).
  const tessera::testing::ScopedEnv precise("TESSERA_LINEAR", "f32");
  std::mt19937_64 rng(11);
  for (DType dtype : tessera::testing::kQuantizedDTypes) {
    CAPTURE(dtype_name(dtype));
    const int64_t K = 512, N = 6, M = 3;
    std::vector<uint8_t> bytes = tessera::testing::random_quantized(dtype, N, K, rng);
    std::vector<float> dense(static_cast<size_t>(N * K));
    quant::dequantize_row(dtype, bytes.data(), dense.data(), N * K);
    Graph g;
    Tensor x = g.input("x", {M, K}, DType::F32);
    Tensor ids = g.input("ids", {4}, DType::I32);
    Tensor wq = g.constant({N, K}, dtype, std::as_bytes(std::span<const uint8_t>(bytes)));
    Tensor wf = g.constant({N, K}, dense);
    g.output("q", linear(x, wq));
    g.output("f", linear(x, wf));
    g.output("gq", gather(wq, ids));
    g.output("gf", gather(wf, ids));
    for (BackendKind backend : {BackendKind::Reference, BackendKind::Cpu}) {
      GraphSession s(g, SessionOptions{.backend = backend});
      std::vector<float> xs(static_cast<size_t>(M * K));
      std::normal_distribution<float> normal(0.f, 1.f);
      for (float& v : xs) v = normal(rng);
      s.write("x", Box{{0, M}, {0, K}}, xs);
      s.write("ids", Box{{0, 4}}, std::vector<int32_t>{5, 0, 2, 5});
      std::vector<float> q = s.read<float>("q", Box{{0, M}, {0, N}});
      std::vector<float> f = s.read<float>("f", Box{{0, M}, {0, N}});
      for (size_t i = 0; i < q.size(); ++i) CHECK(q[i] == doctest::Approx(f[i]).epsilon(1e-4).scale(1e-3));
      std::vector<float> gq = s.read<float>("gq", Box{{0, 4}, {0, K}});
      std::vector<float> gf = s.read<float>("gf", Box{{0, 4}, {0, K}});
      CHECK(gq == gf);
      // A sub-box equals the same elements of the full computation, bitwise.
      GraphSession part(g, SessionOptions{.backend = backend});
      part.write("x", Box{{0, M}, {0, K}}, xs);
      std::vector<float> one = part.read<float>("q", Box{{1, 2}, {2, 5}});
      for (int64_t n = 2; n < 5; ++n) CHECK(one[static_cast<size_t>(n - 2)] == q[static_cast<size_t>(N + n)]);
    }
  }
}

TEST_CASE("ops: quantised weights are rejected where no kernel dequantises them") {
  Graph g;
  std::vector<uint8_t> bytes(34 * 2, 0);
  Tensor wq = g.constant({2, 32}, DType::Q8_0, std::as_bytes(std::span<const uint8_t>(bytes)));
  Tensor x = g.input("x", {2, 32}, DType::F32);
  CHECK_THROWS_WITH_AS(add(wq, x), doctest::Contains("does not accept quantised q8_0"), Error);
  CHECK_THROWS_WITH_AS(linear(x, g.input("w", {2, 33}, DType::F32)), doctest::Contains("[linear]"), Error);
  CHECK_THROWS_WITH_AS(g.constant({2, 33}, DType::Q8_0, std::as_bytes(std::span<const uint8_t>(bytes))),
                       doctest::Contains("whole blocks"), Error);
  CHECK_THROWS_WITH_AS(g.input("q", {2, 32}, DType::Q4_0), doctest::Contains("cannot be quantised"), Error);
  CHECK_THROWS_WITH_AS(linear(x, g.input("i", {2, 32}, DType::I32)), doctest::Contains("[linear]"), Error);
}
