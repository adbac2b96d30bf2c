// Test support for optimised CPU kernels: a single-op graph over random inputs, a kernel run on
// one box into a buffer holding just that box, and the checks every optimised kernel gets on
// every instruction set this CPU has: close to the reference kernel, bitwise equal on random
// sub-boxes, and the same values through a strided (larger) output view.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "tests/support/op_harness.h"

namespace tessera::kernel_testing {

using testing::Buffer;
using testing::ValueRange;

// The instruction sets to test: portable always, AVX2 and AVX-512 where the CPU has them.
inline std::vector<cpu::Isa> test_isas() {
  std::vector<cpu::Isa> isas = {cpu::Isa::Portable};
  for (cpu::Isa isa : {cpu::Isa::Avx2, cpu::Isa::Avx512})
    if (cpu::isa_supported(isa)) isas.push_back(isa);
  return isas;
}

struct OpFixture {
  Graph graph;
  Tensor out;
  std::vector<Buffer> buffers;    // one per graph input, in graph.inputs() order
  std::vector<TensorView> views;  // one per op input (graph inputs and constants only)

  const Node& node() const { return graph.node(out.id); }

  // Fills every graph input with random values (ranges[i] for input i) and makes the views.
  void prepare(std::mt19937_64& rng, const std::vector<ValueRange>& ranges = {}) {
    buffers.clear();
    for (size_t i = 0; i < graph.inputs().size(); ++i) {
      const Node& n = graph.node(graph.inputs()[i]);
      buffers.push_back(testing::make_buffer(n));
      testing::fill_box(buffers.back(), n, Box::full(n.shape),
                        i < ranges.size() ? ranges[i] : ValueRange{}, rng);
    }
    views.clear();
    for (NodeId in : node().inputs) {
      const Node& n = graph.node(in);
      const void* data = nullptr;
      if (n.kind == OpKind::Constant) {
        data = graph.constant_data(n.constant).data;
      } else {
        for (size_t i = 0; i < graph.inputs().size(); ++i)
          if (graph.inputs()[i] == in) data = buffers[i].data();
      }
      REQUIRE_MESSAGE(data != nullptr, "op inputs must be graph inputs or constants");
      views.push_back(dense_view(const_cast<void*>(data), n.dtype, Box::full(n.shape)));
    }
  }

  // Computes `box` with `kernel` into a dense f32 buffer of that box.
  std::vector<float> run(KernelFn kernel, const Box& box) const {
    std::vector<float> result(static_cast<size_t>(box.volume()));
    TensorView view = dense_view(result.data(), DType::F32, box);
    absl::Status st = kernel(KernelCall{graph, node(), views, view, box});
    REQUIRE_MESSAGE(st.ok(), st.ToString());
    return result;
  }

  KernelFn optimised(cpu::Isa isa) const {
    KernelFn fn = cpu::optimised_kernel_for(graph, node(), isa);
    REQUIRE_MESSAGE(static_cast<bool>(fn), "no optimised kernel for ", op_display_name(node()));
    return fn;
  }
};

// |optimised - reference| <= tolerance(flat index, reference value) over the full output.
using Tolerance = std::function<double(int64_t index, double reference)>;

inline void check_close(const OpFixture& f, cpu::Isa isa, const Tolerance& tolerance) {
  const std::string isa_label = cpu::isa_name(isa);
  CAPTURE(isa_label);
  const Box full = Box::full(f.node().shape);
  const std::vector<float> fast = f.run(f.optimised(isa), full);
  const std::vector<float> ref = f.run(ref::reference_kernel(f.node().kind), full);
  for (size_t i = 0; i < fast.size(); ++i) {
    const double expected = ref[i], tol = tolerance(static_cast<int64_t>(i), expected);
    const bool same = fast[i] == expected || (std::isnan(fast[i]) && std::isnan(expected));
    if (!same && !(std::fabs(fast[i] - expected) <= tol))
      FAIL("element ", i, ": optimised ", fast[i], " vs reference ", expected, " (tolerance ", tol,
           ")");
  }
}

// Random sub-boxes (biased to single rows and full extents), each computed alone, are bitwise
// equal to the same elements of the full box; one more box goes through a strided view over a
// buffer of the full shape, whose other elements must stay untouched.
inline void check_sub_boxes(const OpFixture& f, cpu::Isa isa, std::mt19937_64& rng,
                            int count = 12) {
  const std::string isa_label = cpu::isa_name(isa);
  CAPTURE(isa_label);
  const Node& n = f.node();
  const KernelFn fast = f.optimised(isa);
  const Box full_box = Box::full(n.shape);
  std::vector<float> full = f.run(fast, full_box);
  TensorView full_view = dense_view(full.data(), DType::F32, full_box);
  for (int i = 0; i < count; ++i) {
    const Box box = testing::random_box(n.shape, rng);
    CAPTURE(box.to_string());
    std::vector<float> part = f.run(fast, box);
    TensorView part_view = dense_view(part.data(), DType::F32, box);
    ref::for_each_index(box, [&](const int64_t* index) {
      const float x = *part_view.at<float>(index), y = *full_view.at<float>(index);
      if (std::memcmp(&x, &y, sizeof(float)) != 0)
        FAIL("sub-box value ", x, " differs from full-box value ", y);
    });
  }
  const Box box = testing::random_box(n.shape, rng);
  CAPTURE(box.to_string());
  std::vector<float> big(full.size(), -7.0f);
  TensorView big_view = dense_view(big.data(), DType::F32, full_box);
  REQUIRE(fast(KernelCall{f.graph, n, f.views, big_view, box}).ok());
  ref::for_each_index(full_box, [&](const int64_t* index) {
    const float x = *big_view.at<float>(index);
    const float y = box.contains_point(index) ? *full_view.at<float>(index) : -7.0f;
    if (std::memcmp(&x, &y, sizeof(float)) != 0) FAIL("strided-view value ", x, " should be ", y);
  });
}

}  // namespace tessera::kernel_testing
