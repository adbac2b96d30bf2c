// Kernel scratch (KernelArgs::scratch): kernels that need scratch take it from the call, never
// from their own allocations. Checks, on every instruction set: a strided input view (which
// needs the most scratch) gives the same bits as a dense one; the bound for dense views
// (kernel_scratch_bytes(.., true)) is enough for dense views; and too little scratch for a
// strided view is an error status, never a crash.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "engine/ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/kernels/kernel_fixture.h"

namespace tessera {
namespace {

using kernel_testing::OpFixture;

// Runs the optimised kernel over the full output with input 0 given as a view whose last axis
// has stride 2 (the values at even positions of a buffer twice as long), or dense; `scratch`
// bytes of scratch (-1: the worst-case bound).
absl::Status run_with(const OpFixture& f, cpu::Isa isa, bool strided, int64_t scratch_bytes, std::vector<float>& result) {
  const Node& node = f.node();
  const Node& x = f.graph.node(node.inputs[0]);
  std::vector<TensorView> views = f.views;
  std::vector<float> wide(static_cast<size_t>(2 * Box::full(x.shape).volume()));
  if (strided) {
    const float* dense = static_cast<const float*>(f.views[0].data);
    for (int64_t i = 0; i < Box::full(x.shape).volume(); ++i) wide[static_cast<size_t>(2 * i)] = dense[i];
    views[0] = dense_view(wide.data(), DType::F32, Box::full(x.shape));
    for (int d = 0; d < x.rank(); ++d) views[0].strides[static_cast<size_t>(d)] *= 2;
  }
  const Box full = Box::full(node.shape);
  result.assign(static_cast<size_t>(full.volume()), 0.0f);
  const TensorView out = dense_view(result.data(), DType::F32, full);
  std::vector<KernelInput> inputs;
  kernel_inputs(f.graph, node, views, inputs);
  const int64_t bytes = scratch_bytes >= 0 ? scratch_bytes : kernel_scratch_bytes(f.graph, node, false);
  alignas(64) static std::byte memory[1 << 20];
  REQUIRE(bytes <= static_cast<int64_t>(sizeof(memory)));
  return f.optimised(isa)(KernelArgs{kernel_node(f.graph, node), inputs, out, full,
                                     std::span<std::byte>(memory, static_cast<size_t>(bytes))});
}

void check_scratch(const OpFixture& f) {
  const int64_t dense_bound = kernel_scratch_bytes(f.graph, f.node(), true);
  CHECK(dense_bound <= kernel_scratch_bytes(f.graph, f.node(), false));
  for (cpu::Isa isa : kernel_testing::test_isas()) {
    CAPTURE(cpu::isa_name(isa));
    std::vector<float> dense, strided;
    REQUIRE(run_with(f, isa, false, dense_bound, dense).ok());
    const absl::Status st = run_with(f, isa, true, -1, strided);
    REQUIRE_MESSAGE(st.ok(), st.ToString());
    CHECK(std::memcmp(dense.data(), strided.data(), dense.size() * sizeof(float)) == 0);
    if (kernel_scratch_bytes(f.graph, f.node(), false) > 0) {
      std::vector<float> unused;
      CHECK_FALSE(run_with(f, isa, true, 0, unused).ok());
    }
  }
}

TEST_CASE("kernels: scratch comes from the call, strided views need more and get the same bits") {
  std::mt19937_64 rng(71);
  SUBCASE("linear") {
    OpFixture f;
    Tensor x = f.graph.input("x", {5, 96}, DType::F32);
    f.out = linear(x, f.graph.input("w", {7, 96}, DType::F32));
    f.prepare(rng);
    check_scratch(f);
  }
  SUBCASE("rms_norm") {
    OpFixture f;
    f.out = rms_norm(f.graph.input("x", {3, 4, 40}, DType::F32), Tensor{}, 1e-6);
    f.prepare(rng);
    check_scratch(f);
  }
  SUBCASE("rope") {
    OpFixture f;
    Tensor x = f.graph.input("x", {6, 2, 16}, DType::F32);
    f.out = rope(x, f.graph.input("pos", {6}, DType::I32), 12, 10000.0, RopeMode::HalfSplit);
    f.prepare(rng, {{-2, 2}, {0, 50}});
    check_scratch(f);
  }
  SUBCASE("attention") {
    OpFixture f;
    Tensor q = f.graph.input("q", {9, 4, 16}, DType::F32);
    Tensor k = f.graph.input("k", {9, 2, 16}, DType::F32);
    Tensor v = f.graph.input("v", {9, 2, 16}, DType::F32);
    f.out = attention(q, k, v, AttentionParams{.scale = 0.25, .causal = true});
    f.prepare(rng);
    check_scratch(f);
  }
  SUBCASE("attention with a half K/V") {
    for (DType kv : {DType::F16, DType::BF16}) {
      OpFixture f;
      Tensor q = f.graph.input("q", {9, 4, 16}, DType::F32);
      Tensor k = f.graph.input("k", {9, 2, 16}, kv);
      Tensor v = f.graph.input("v", {9, 2, 16}, kv);
      f.out = attention(q, k, v, AttentionParams{.scale = 0.25, .causal = true});
      f.prepare(rng);
      check_scratch(f);
    }
  }
}

}  // namespace
}  // namespace tessera
