// fused_elementwise kernels: random programs on odd shapes with broadcasting inputs must give
// BITWISE the values of the unfused chain of unary / binary nodes, with the reference kernels
// and with the optimised CPU kernels on every instruction set this CPU has (the chain using the
// optimised kernel of each node where there is one, as the CPU backend does); sub-boxes,
// strided output views and strided input views give bitwise the full box's values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/session.h"
#include "tests/kernels/kernel_fixture.h"
#include "tests/support/fused_programs.h"

using namespace tessera;
using tessera::kernel_testing::OpFixture;
using tessera::testing::Buffer;

namespace {

// Every node of g over its full box, each computed by kernel_of(node); `inputs` holds the
// buffers of g.inputs() in order.
std::vector<Buffer> evaluate_with(const Graph& g, const std::vector<Buffer>& inputs,
                                  const std::function<KernelFn(const Node&)>& kernel_of) {
  std::vector<Buffer> values(static_cast<size_t>(g.size()));
  for (size_t i = 0; i < g.inputs().size(); ++i)
    values[static_cast<size_t>(g.inputs()[i])] = inputs[i];
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::Input) continue;
    values[static_cast<size_t>(id)] = testing::make_buffer(n);
    std::vector<TensorView> views;
    for (NodeId in : n.inputs) {
      const Node& m = g.node(in);
      views.push_back(
          dense_view(values[static_cast<size_t>(in)].data(), m.dtype, Box::full(m.shape)));
    }
    const Box box = Box::full(n.shape);
    TensorView out = dense_view(values[static_cast<size_t>(id)].data(), n.dtype, box);
    const absl::Status st = kernel_of(n)(KernelCall{g, n, views, out, box});
    REQUIRE_MESSAGE(st.ok(), st.ToString());
  }
  return values;
}

// The kernel the CPU backend runs for a node on `isa`.
KernelFn cpu_kernel(const Graph& g, const Node& n, cpu::Isa isa) {
  const KernelFn fast = cpu::optimised_kernel_for(g, n, isa);
  return fast ? fast : ref::reference_kernel(n.kind);
}

// Bitwise, except that any NaN equals any NaN: fused and unfused are different code, and when
// both operands of an operation are NaN, IEEE 754 leaves open which one's sign and payload the
// result carries (it follows the operand order the compiler picked, which differs between
// optimisation levels).
void check_bitwise(const Buffer& fused, const Buffer& chain, const std::string& what) {
  REQUIRE(fused.size() == chain.size());
  const auto* x = reinterpret_cast<const float*>(fused.data());
  const auto* y = reinterpret_cast<const float*>(chain.data());
  for (size_t i = 0; i < fused.size() / sizeof(float); ++i)
    if (std::memcmp(x + i, y + i, sizeof(float)) != 0 && !(std::isnan(x[i]) && std::isnan(y[i])))
      FAIL(what, ": element ", i, " fused ", x[i], " vs unfused chain ", y[i]);
}

// Odd shapes up to 257 wide, rank 1..4, at most ~12k elements.
Shape random_output_shape(std::mt19937_64& rng) {
  static constexpr int64_t kWidths[] = {1, 3, 7, 8, 9, 15, 16, 17, 63, 127, 129, 255, 257};
  Shape s;
  const int rank = static_cast<int>(rng() % 4) + 1;
  for (int d = 0; d + 1 < rank; ++d) s.push_back(static_cast<int64_t>(rng() % 7) + 1);
  s.push_back(kWidths[rng() % std::size(kWidths)]);
  while (shape_volume(s) > 12000) s.front() = 1;
  return s;
}

// A view of `dense` (a full-shape f32 tensor) through a copy with other strides: every stride
// doubled (strided last axis, staged by the kernel) or rows padded (unit last stride).
TensorView restrided(const Buffer& dense, const Shape& shape, bool double_strides,
                     std::vector<float>& storage) {
  const Box full = Box::full(shape);
  TensorView view;
  view.dtype = DType::F32;
  view.extent = full;
  int64_t stride = double_strides ? 2 : 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    view.strides[static_cast<size_t>(d)] = stride;
    stride *= shape[static_cast<size_t>(d)] + (double_strides ? 0 : 3);
  }
  storage.assign(static_cast<size_t>(std::max<int64_t>(stride, 1)), std::nanf(""));
  view.data = storage.data();
  const TensorView src = dense_view(const_cast<std::byte*>(dense.data()), DType::F32, full);
  ref::for_each_index(full, [&](const int64_t* i) { *view.at<float>(i) = *src.at<float>(i); });
  return view;
}

// The fused kernel on the full box through strided input views equals the dense-input result.
void check_strided_inputs(const OpFixture& f, KernelFn kernel, std::mt19937_64& rng) {
  const Box full = Box::full(f.node().shape);
  const std::vector<float> dense = f.run(kernel, full);
  std::vector<std::vector<float>> storage(f.views.size());
  std::vector<TensorView> views;
  for (size_t k = 0; k < f.views.size(); ++k) {
    const Node& in = f.graph.node(f.node().inputs[k]);
    Buffer copy(static_cast<size_t>(in.size_bytes()));
    std::memcpy(copy.data(), f.views[k].data, copy.size());
    views.push_back(restrided(copy, in.shape, rng() % 2 == 0, storage[k]));
  }
  std::vector<float> result(dense.size());
  const TensorView out = dense_view(result.data(), DType::F32, full);
  REQUIRE(kernel(KernelCall{f.graph, f.node(), views, out, full}).ok());
  REQUIRE(std::memcmp(result.data(), dense.data(), dense.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("kernels: fused_elementwise is bitwise the unfused chain, reference and CPU per ISA") {
  const uint64_t seed = 46;
  std::mt19937_64 rng(seed);
  CAPTURE(seed);
  int finite = 0, total = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const Shape out = random_output_shape(rng);
    const int n_inputs = trial == 0 ? 16 : static_cast<int>(rng() % 5) + 1;
    const int length = trial == 1 ? 60 : static_cast<int>(rng() % 12) + 1;
    const std::vector<Shape> shapes = testing::broadcast_input_shapes(out, n_inputs, rng);
    const std::vector<FusedInstr> program = testing::random_program(n_inputs, length, rng);
    OpFixture f;
    std::vector<Tensor> inputs;
    for (size_t k = 0; k < shapes.size(); ++k)
      inputs.push_back(f.graph.input("x" + std::to_string(k), shapes[k], DType::F32));
    f.out = fused_elementwise(inputs, program);
    const Tensor chain = testing::unfused_chain(inputs, program);
    const std::string label = op_display_name(f.node()) + " out " + shape_string(out);
    CAPTURE(trial);
    CAPTURE(label);
    REQUIRE(chain.shape() == f.out.shape());
    f.prepare(rng, std::vector<testing::ValueRange>(shapes.size(), {-3.0, 3.0}));
    if (trial % 5 == 2) {  // special values through every function
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                -0.0f,
                                0.0f,
                                89.0f,
                                -200.0f};
      auto* x = reinterpret_cast<float*>(f.buffers[0].data());
      const size_t count = f.buffers[0].size() / sizeof(float);
      for (size_t i = 0; i < std::min(count, std::size(specials)); ++i)
        x[i * 7 % count] = specials[i];
    }
    const size_t fused_id = static_cast<size_t>(f.out.id), chain_id = static_cast<size_t>(chain.id);
    const std::vector<Buffer> reference = evaluate_with(
        f.graph, f.buffers, [](const Node& n) { return ref::reference_kernel(n.kind); });
    check_bitwise(reference[fused_id], reference[chain_id], "reference");
    const auto* values = reinterpret_cast<const float*>(reference[fused_id].data());
    for (size_t i = 0; i < reference[fused_id].size() / sizeof(float); ++i, ++total)
      finite += std::isfinite(values[i]) ? 1 : 0;
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      const std::string isa_label = cpu::isa_name(isa);
      CAPTURE(isa_label);
      const std::vector<Buffer> fast = evaluate_with(
          f.graph, f.buffers, [&](const Node& n) { return cpu_kernel(f.graph, n, isa); });
      check_bitwise(fast[fused_id], fast[chain_id], "cpu " + isa_label);
      kernel_testing::check_sub_boxes(f, isa, rng, 4);
      check_strided_inputs(f, f.optimised(isa), rng);
    }
    check_strided_inputs(f, ref::reference_kernel(OpKind::FusedElementwise), rng);
  }
  MESSAGE("fused results finite: ", finite, " of ", total);
  CHECK(finite * 2 > total);  // the programs exercise real values, not mostly NaN
}

TEST_CASE("kernels: fused_elementwise on a scalar and on empty boxes") {
  OpFixture f;
  const Tensor in[] = {f.graph.input("a", {}, DType::F32), f.graph.input("b", {}, DType::F32)};
  const std::vector<FusedInstr> program = {testing::fused_binary(BinaryFn::Pow, 0, 1),
                                           testing::fused_unary(UnaryFn::Tanh, 2)};
  f.out = fused_elementwise(in, program);
  const Tensor chain = testing::unfused_chain(in, program);
  std::mt19937_64 rng(47);
  f.prepare(rng, {{0.5, 2.0}, {0.5, 2.0}});
  for (cpu::Isa isa : kernel_testing::test_isas()) {
    const std::vector<Buffer> fast = evaluate_with(
        f.graph, f.buffers, [&](const Node& n) { return cpu_kernel(f.graph, n, isa); });
    check_bitwise(fast[static_cast<size_t>(f.out.id)], fast[static_cast<size_t>(chain.id)],
                  cpu::isa_name(isa));
  }
  // An empty box of a rank-2 fused node writes nothing.
  OpFixture g;
  const Tensor x[] = {g.graph.input("x", {3, 5}, DType::F32)};
  g.out = fused_elementwise(x, {testing::fused_unary(UnaryFn::Exp, 0)});
  g.prepare(rng);
  for (cpu::Isa isa : kernel_testing::test_isas()) {
    Box empty = Box::full(g.node().shape);
    empty[0] = Interval(2, 2);
    CHECK(g.run(g.optimised(isa), empty).empty());
  }
}

TEST_CASE("kernels: fused_elementwise in a session: incremental reads equal a fresh session") {
  // y = tanh(x * w + b) / (1 + |x|) as one fused node, next to its unfused chain.
  Graph g;
  const Tensor in[] = {g.input("x", {6, 37}, DType::F32), g.input("w", {37}, DType::F32),
                       g.input("b", {6, 1}, DType::F32)};
  const std::vector<FusedInstr> program = {
      testing::fused_binary(BinaryFn::Mul, 0, 1), testing::fused_binary(BinaryFn::Add, 3, 2),
      testing::fused_unary(UnaryFn::Tanh, 4),     testing::fused_unary(UnaryFn::Abs, 0),
      testing::fused_unary(UnaryFn::Exp, 6),      testing::fused_binary(BinaryFn::Div, 5, 7)};
  g.output("fused", fused_elementwise(in, program));
  g.output("chain", testing::unfused_chain(in, program));
  std::mt19937_64 rng(48);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  auto values = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
  };
  const Box all{{0, 6}, {0, 37}};
  for (BackendKind backend : {BackendKind::Cpu, BackendKind::Reference}) {
    SessionOptions options;
    options.backend = backend;
    GraphSession s(g, options);
    std::vector<float> x = values(6 * 37);
    const std::vector<float> w = values(37), b = values(6);
    s.write("x", all, x);
    s.write("w", Box{{0, 37}}, w);
    s.write("b", Box{{0, 6}, {0, 1}}, b);
    s.read<float>("fused", all);
    for (int step = 0; step < 4; ++step) {
      const int64_t row = static_cast<int64_t>(rng() % 6);
      const std::vector<float> new_row = values(37);
      std::copy(new_row.begin(), new_row.end(), x.begin() + row * 37);
      s.write("x", Box{{row, row + 1}, {0, 37}}, new_row);
      const std::vector<float> part = s.read<float>("fused", Box{{0, 6}, {5, 30}});
      const std::vector<float> incremental = s.read<float>("fused", all);
      GraphSession fresh(g, options);
      fresh.write("x", all, x);
      fresh.write("w", Box{{0, 37}}, w);
      fresh.write("b", Box{{0, 6}, {0, 1}}, b);
      const std::vector<float> full = fresh.read<float>("fused", all);
      const std::vector<float> chain = fresh.read<float>("chain", all);
      CHECK(std::memcmp(incremental.data(), full.data(), full.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(full.data(), chain.data(), chain.size() * sizeof(float)) == 0);
      for (int64_t r = 0; r < 6; ++r)
        CHECK(std::memcmp(part.data() + r * 25, incremental.data() + r * 37 + 5,
                          25 * sizeof(float)) == 0);
    }
  }
}
