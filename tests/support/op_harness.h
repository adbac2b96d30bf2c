// Test support: evaluates single-op graphs with the reference kernels and checks an op's
// forward and needed rules by perturbation (DESIGN.md section 2, "Rules are tested by
// perturbation"). Header-only; include from test files.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/op_def.h"
#include "engine/ops.h"
#include "kernels/ref/access.h"
#include "kernels/ref/ref_kernels.h"

namespace tessera::testing {

// Value range used to fill an input: uniform floats in [lo, hi], or integers in [lo, hi] for
// integer dtypes (bool: 0/1).
struct ValueRange {
  double lo = -2.0;
  double hi = 2.0;
};

using Buffer = std::vector<std::byte>;

inline Buffer make_buffer(const Node& n) { return Buffer(static_cast<size_t>(n.size_bytes())); }

inline void fill_box(Buffer& buf, const Node& n, const Box& box, const ValueRange& range, std::mt19937_64& rng) {
  TensorView v = dense_view(buf.data(), n.dtype, Box::full(n.shape));
  ref::for_each_index(box, [&](const int64_t* i) {
    double x;
    if (n.dtype == DType::Bool) {
      x = static_cast<double>(rng() & 1);
    } else if (is_integer(n.dtype)) {
      std::uniform_int_distribution<int64_t> d(static_cast<int64_t>(range.lo), static_cast<int64_t>(range.hi));
      x = static_cast<double>(d(rng));
    } else {
      std::uniform_real_distribution<double> d(range.lo, range.hi);
      x = d(rng);
    }
    ref::store(v, i, x);
  });
}

// Computes every node of `g` over its full box with the reference kernels; `inputs` holds the
// buffers of g.inputs() in order. Returns one buffer per node (empty for unused ids).
inline std::vector<Buffer> evaluate_full(const Graph& g, const std::vector<Buffer>& inputs) {
  std::vector<Buffer> values(static_cast<size_t>(g.size()));
  for (size_t i = 0; i < g.inputs().size(); ++i) values[static_cast<size_t>(g.inputs()[i])] = inputs[i];
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::Input) continue;
    values[static_cast<size_t>(id)] = make_buffer(n);
    std::vector<TensorView> views;
    for (NodeId in : n.inputs) {
      const Node& m = g.node(in);
      views.push_back(dense_view(values[static_cast<size_t>(in)].data(), m.dtype, Box::full(m.shape)));
    }
    TensorView out = dense_view(values[static_cast<size_t>(id)].data(), n.dtype, Box::full(n.shape));
    Box box = Box::full(n.shape);
    absl::Status st = ref::reference_kernel(n.kind)(KernelCall{g, n, views, out, box});
    REQUIRE_MESSAGE(st.ok(), st.ToString());
  }
  return values;
}

inline Box random_box(const Shape& shape, std::mt19937_64& rng) {
  Box b = Box::of_rank(static_cast<int>(shape.size()));
  for (int d = 0; d < b.rank(); ++d) {
    if (shape[d] == 0) continue;
    std::uniform_int_distribution<int64_t> u(0, shape[d] - 1);
    int64_t x = u(rng), y = u(rng);
    // Bias towards thin boxes (single rows) and full extents, the cases that matter.
    int kind = static_cast<int>(rng() % 4);
    if (kind == 0) b[d] = Interval(x, x + 1);
    else if (kind == 1) b[d] = Interval(0, shape[d]);
    else b[d] = Interval(std::min(x, y), std::max(x, y) + 1);
  }
  return b;
}

// Compares element (index) of two tensors of node n bitwise.
inline bool same_element(const Buffer& a, const Buffer& b, const Node& n, const int64_t* index) {
  TensorView va = dense_view(const_cast<std::byte*>(a.data()), n.dtype, Box::full(n.shape));
  const int64_t size = dtype_size(n.dtype);
  const int64_t o = va.offset(index) * size;
  return std::memcmp(a.data() + o, b.data() + o, static_cast<size_t>(size)) == 0;
}

struct OpCase {
  std::string label;
  // Builds the op under test over graph inputs (declared with g.input) and returns it.
  std::function<Tensor(Graph&)> build;
  // Value range per input, in g.inputs() order; missing entries use the default range.
  std::vector<ValueRange> ranges = {};
};

// Checks, over `trials` random trials with a fixed seed:
// - forward soundness: perturbing input i inside a random box changes only outputs inside
//   forward(i, box) (and forward stays inside the output shape);
// - needed soundness: computing a random output box, with every input element outside the
//   needed boxes replaced by other values, gives bitwise the full computation's values there;
//   the box is computed into a buffer holding only that box (offset addressing).
inline void check_rules(const OpCase& c, uint64_t seed = 1, int trials = 40) {
  Graph g;
  Tensor out_t = c.build(g);
  const Node& out = g.node(out_t.id);
  const OpDef& def = op_def(out.kind);
  std::mt19937_64 rng(seed);
  auto range_of = [&](size_t i) { return i < c.ranges.size() ? c.ranges[i] : ValueRange{}; };
  std::vector<Buffer> inputs;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    inputs.push_back(make_buffer(n));
    fill_box(inputs.back(), n, Box::full(n.shape), range_of(i), rng);
  }
  std::vector<Buffer> base = evaluate_full(g, inputs);
  const Buffer& base_out = base[static_cast<size_t>(out_t.id)];
  // Position of each graph input among the op's inputs.
  for (int trial = 0; trial < trials; ++trial) {
    CAPTURE(c.label);
    CAPTURE(seed);
    CAPTURE(trial);
    // Forward.
    for (int k = 0; k < static_cast<int>(out.inputs.size()); ++k) {
      NodeId in_id = out.inputs[static_cast<size_t>(k)];
      const Node& in = g.node(in_id);
      size_t gi = 0;
      while (gi < g.inputs().size() && g.inputs()[gi] != in_id) ++gi;
      if (gi == g.inputs().size() || in.volume() == 0) continue;  // not a graph input
      Box dirty = random_box(in.shape, rng);
      Region fwd(out.rank());
      for (int k2 = 0; k2 < static_cast<int>(out.inputs.size()); ++k2)
        if (out.inputs[static_cast<size_t>(k2)] == in_id) def.forward(g, out, k2, dirty, fwd);
      for (const Box& b : fwd.boxes()) REQUIRE_MESSAGE(b.inside(out.shape), "forward box ", b.to_string(), " outside output");
      std::vector<Buffer> perturbed = inputs;
      fill_box(perturbed[gi], in, dirty, range_of(gi), rng);
      std::vector<Buffer> values = evaluate_full(g, perturbed);
      const Buffer& new_out = values[static_cast<size_t>(out_t.id)];
      ref::for_each_index(Box::full(out.shape), [&](const int64_t* i) {
        if (!same_element(base_out, new_out, out, i)) {
          Box point = Box::of_rank(out.rank());
          for (int d = 0; d < out.rank(); ++d) point[d] = Interval(i[d], i[d] + 1);
          if (!fwd.contains(point))
            FAIL("input ", k, " dirty ", dirty.to_string(), " changed output ", point.to_string(),
                 " outside forward ", fwd.to_string());
        }
      });
    }
    // Needed.
    if (out.volume() == 0) continue;
    Box want = random_box(out.shape, rng);
    std::vector<Box> needed(out.inputs.size(), Box::of_rank(0));
    def.needed(g, out, want, needed);
    std::vector<Buffer> scrambled = inputs;
    for (size_t gi = 0; gi < g.inputs().size(); ++gi) {
      const Node& in = g.node(g.inputs()[gi]);
      Box keep = Box::of_rank(in.rank());
      for (size_t k = 0; k < out.inputs.size(); ++k)
        if (out.inputs[k] == g.inputs()[gi]) {
          REQUIRE_MESSAGE((needed[k].empty() || needed[k].inside(in.shape)), "needed box ", needed[k].to_string(),
                          " outside input ", k);
          keep = keep.hull(needed[k]);
        }
      Buffer fresh = make_buffer(in);
      fill_box(fresh, in, Box::full(in.shape), range_of(gi), rng);
      // Copy the kept box back over the fresh values.
      TensorView src = dense_view(scrambled[gi].data(), in.dtype, Box::full(in.shape));
      TensorView dst = dense_view(fresh.data(), in.dtype, Box::full(in.shape));
      ref::for_each_index(keep, [&](const int64_t* i) {
        const int64_t size = dtype_size(in.dtype);
        std::memcpy(static_cast<std::byte*>(dst.data) + dst.offset(i) * size,
                    static_cast<std::byte*>(src.data) + src.offset(i) * size, static_cast<size_t>(size));
      });
      scrambled[gi] = std::move(fresh);
    }
    std::vector<Buffer> values = evaluate_full(g, scrambled);
    // Recompute `want` alone into a buffer covering only `want`, from the scrambled inputs.
    std::vector<TensorView> views;
    for (NodeId in : out.inputs) {
      const Node& m = g.node(in);
      views.push_back(dense_view(values[static_cast<size_t>(in)].data(), m.dtype, Box::full(m.shape)));
    }
    Buffer part(static_cast<size_t>(want.volume() * dtype_size(out.dtype)));
    TensorView part_view = dense_view(part.data(), out.dtype, want);
    absl::Status st = ref::reference_kernel(out.kind)(KernelCall{g, out, views, part_view, want});
    REQUIRE_MESSAGE(st.ok(), st.ToString());
    TensorView full_view = dense_view(const_cast<std::byte*>(base_out.data()), out.dtype, Box::full(out.shape));
    const int64_t size = dtype_size(out.dtype);
    ref::for_each_index(want, [&](const int64_t* i) {
      if (std::memcmp(static_cast<std::byte*>(part_view.data) + part_view.offset(i) * size,
                      static_cast<std::byte*>(full_view.data) + full_view.offset(i) * size,
                      static_cast<size_t>(size)) != 0) {
        Box point = Box::of_rank(out.rank());
        for (int d = 0; d < out.rank(); ++d) point[d] = Interval(i[d], i[d] + 1);
        FAIL("output ", point.to_string(), " of box ", want.to_string(), " differs when computed from needed inputs");
      }
    });
  }
}

}  // namespace tessera::testing
