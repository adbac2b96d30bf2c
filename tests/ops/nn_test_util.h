// Helpers shared by the nn and attention op tests: evaluating a small graph from plain values,
// and calling an op's rules directly.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/support/op_harness.h"

namespace tessera::testing {

// Evaluates g with the reference kernels, inputs (in g.inputs() order) taken from `values`
// (stored with each input's dtype rounding), and returns node `out` row-major as doubles.
inline std::vector<double> evaluate(const Graph& g, Tensor out,
                                    const std::vector<std::vector<double>>& values) {
  REQUIRE(values.size() == g.inputs().size());
  std::vector<Buffer> inputs;
  for (size_t i = 0; i < values.size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    REQUIRE(static_cast<int64_t>(values[i].size()) == n.volume());
    inputs.push_back(make_buffer(n));
    TensorView view = dense_view(inputs.back().data(), n.dtype, Box::full(n.shape));
    size_t k = 0;
    ref::for_each_index(Box::full(n.shape),
                        [&](const int64_t* index) { ref::store(view, index, values[i][k++]); });
  }
  std::vector<Buffer> all = evaluate_full(g, inputs);
  const Node& n = g.node(out.id);
  TensorView view =
      dense_view(all[static_cast<size_t>(out.id)].data(), n.dtype, Box::full(n.shape));
  std::vector<double> result;
  ref::for_each_index(Box::full(n.shape),
                      [&](const int64_t* index) { result.push_back(ref::load(view, index)); });
  return result;
}

// Values exactly representable in f32, so expected results can be computed from them directly.
inline std::vector<double> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<float>(d(rng));
  return v;
}

inline std::vector<double> iota(int64_t n, double start = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  return v;
}

inline void check_close(const std::vector<double>& got, const std::vector<double>& want,
                        double epsilon = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(epsilon).scale(1.0));
  }
}

inline Region forward_of(const Tensor& out, int input, const Box& dirty) {
  const Node& n = out.node();
  Region r(n.rank());
  op_def(n.kind).forward(*out.graph, n, input, dirty, r);
  return r;
}

inline std::vector<Box> needed_of(const Tensor& out, const Box& box) {
  const Node& n = out.node();
  std::vector<Box> boxes(n.inputs.size());
  op_def(n.kind).needed(*out.graph, n, box, boxes);
  return boxes;
}

// Computes random output boxes from input buffers that hold only the boxes the needed rule names
// (as a session's transient buffers may) and compares them bitwise with the full computation. A
// kernel that reads outside its needed boxes reads unrelated memory there: wrong values, a crash,
// or an AddressSanitizer report.
inline void check_reads_stay_in_needed(const OpCase& c, uint64_t seed = 1, int trials = 20) {
  Graph g;
  Tensor out_t = c.build(g);
  const Node& out = g.node(out_t.id);
  std::mt19937_64 rng(seed);
  std::vector<Buffer> inputs;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    inputs.push_back(make_buffer(n));
    fill_box(inputs.back(), n, Box::full(n.shape), i < c.ranges.size() ? c.ranges[i] : ValueRange{},
             rng);
  }
  std::vector<Buffer> full = evaluate_full(g, inputs);
  const int64_t size = dtype_size(out.dtype);
  TensorView full_out =
      dense_view(full[static_cast<size_t>(out_t.id)].data(), out.dtype, Box::full(out.shape));
  for (int trial = 0; trial < trials; ++trial) {
    CAPTURE(c.label);
    CAPTURE(trial);
    Box want = random_box(out.shape, rng);
    std::vector<Box> needed(out.inputs.size(), Box::of_rank(0));
    op_def(out.kind).needed(g, out, want, needed);
    std::vector<Buffer> parts(out.inputs.size());
    std::vector<TensorView> views;
    for (size_t k = 0; k < out.inputs.size(); ++k) {
      const Node& in = g.node(out.inputs[k]);
      const int64_t in_size = dtype_size(in.dtype);
      parts[k].resize(static_cast<size_t>((needed[k].empty() ? 0 : needed[k].volume()) * in_size));
      views.push_back(dense_view(parts[k].data(), in.dtype, needed[k]));
      TensorView src = dense_view(full[static_cast<size_t>(out.inputs[k])].data(), in.dtype,
                                  Box::full(in.shape));
      ref::for_each_index(needed[k], [&](const int64_t* i) {
        std::memcpy(parts[k].data() + views[k].offset(i) * in_size,
                    static_cast<std::byte*>(src.data) + src.offset(i) * in_size,
                    static_cast<size_t>(in_size));
      });
    }
    Buffer part(static_cast<size_t>(want.volume() * size));
    TensorView part_view = dense_view(part.data(), out.dtype, want);
    absl::Status st = ref::reference_kernel(out.kind)(KernelCall{g, out, views, part_view, want});
    REQUIRE_MESSAGE(st.ok(), st.ToString());
    ref::for_each_index(want, [&](const int64_t* i) {
      if (std::memcmp(part.data() + part_view.offset(i) * size,
                      static_cast<std::byte*>(full_out.data) + full_out.offset(i) * size,
                      static_cast<size_t>(size)) != 0)
        FAIL("box ", want.to_string(), " computed from needed-only buffers differs");
    });
  }
}

// check_rules, then check_reads_stay_in_needed on the same case.
inline void check_rules_and_reads(const OpCase& c, uint64_t seed = 1, int trials = 40) {
  check_rules(c, seed, trials);
  check_reads_stay_in_needed(c, seed);
}

}  // namespace tessera::testing
