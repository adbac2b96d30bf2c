#include <doctest/doctest.h>

#include <random>

#include "tests/kernels/kernel_fixture.h"
#include "tests/support/quant_blocks.h"

using namespace tessera;
using tessera::kernel_testing::OpFixture;

namespace {

// A random shape of `volume` elements (factors of volume spread over 1 to 4 dims).
Shape random_factorisation(int64_t volume, std::mt19937_64& rng) {
  Shape s;
  int64_t rest = volume;
  const int rank = static_cast<int>(rng() % 4) + 1;
  for (int d = 0; d + 1 < rank; ++d) {
    std::vector<int64_t> divisors;
    for (int64_t i = 1; i <= rest; ++i)
      if (rest % i == 0) divisors.push_back(i);
    const int64_t f = divisors[rng() % divisors.size()];
    s.push_back(f);
    rest /= f;
  }
  s.push_back(rest);
  return s;
}

const auto kExact = [](int64_t, double) { return 0.0; };

}  // namespace

TEST_CASE("kernels: reshape copies exactly and is box-independent") {
  const uint64_t seed = 51;
  std::mt19937_64 rng(seed);
  const int64_t volumes[] = {1, 12, 60, 96, 210, 576};
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t volume = volumes[rng() % std::size(volumes)];
    const Shape in = random_factorisation(volume, rng), out = random_factorisation(volume, rng);
    OpFixture f;
    f.out = reshape(f.graph.input("x", in, DType::F32), out);
    f.prepare(rng);
    CAPTURE(shape_string(in));
    CAPTURE(shape_string(out));
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      kernel_testing::check_close(f, isa, kExact);
      kernel_testing::check_sub_boxes(f, isa, rng, 6);
    }
  }
}

TEST_CASE("kernels: gather of f32 tables copies rows exactly") {
  const uint64_t seed = 52;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    Shape table = {static_cast<int64_t>(rng() % 30) + 1, static_cast<int64_t>(rng() % 40) + 1};
    if (trial % 4 == 0) table.push_back(3);
    Shape ids = {static_cast<int64_t>(rng() % 9) + 1};
    if (trial % 3 == 0) ids.insert(ids.begin(), 2);
    OpFixture f;
    Tensor values = f.graph.input("table", table, DType::F32);
    f.out = gather(values, f.graph.input("ids", ids, trial % 2 ? DType::I32 : DType::I64));
    f.prepare(rng, {{-1, 1}, {0, static_cast<double>(table[0] - 1)}});
    CAPTURE(shape_string(table));
    CAPTURE(shape_string(ids));
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      kernel_testing::check_close(f, isa, kExact);
      kernel_testing::check_sub_boxes(f, isa, rng, 6);
    }
  }
}

TEST_CASE("kernels: gather of quantised tables equals the reference dequantisation") {
  std::mt19937_64 rng(53);
  for (DType dtype : testing::kQuantizedDTypes) {
    const int64_t vocab = 37, dim = dtype_block_size(dtype) * 3;
    std::vector<uint8_t> bytes = testing::random_quantized(dtype, vocab, dim, rng);
    OpFixture f;
    Tensor table =
        f.graph.constant({vocab, dim}, dtype, std::as_bytes(std::span<const uint8_t>(bytes)));
    f.out = gather(table, f.graph.input("ids", {2, 5}, DType::I32));
    f.prepare(rng, {{0, static_cast<double>(vocab - 1)}});
    CAPTURE(std::string(dtype_name(dtype)));
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      kernel_testing::check_close(f, isa, kExact);
      kernel_testing::check_sub_boxes(f, isa, rng, 6);
    }
  }
}

TEST_CASE("kernels: gather reports an out-of-range id as an error status") {
  std::mt19937_64 rng(54);
  OpFixture f;
  Tensor values = f.graph.input("table", {4, 8}, DType::F32);
  f.out = gather(values, f.graph.input("ids", {3}, DType::I32));
  f.prepare(rng, {{-1, 1}, {0, 3}});
  reinterpret_cast<int32_t*>(f.buffers[1].data())[1] = 4;
  std::vector<float> out(24);
  TensorView view = dense_view(out.data(), DType::F32, Box::full(f.node().shape));
  for (cpu::Isa isa : kernel_testing::test_isas()) {
    const absl::Status st =
        f.optimised(isa)(KernelCall{f.graph, f.node(), f.views, view, Box::full(f.node().shape)});
    CHECK(absl::IsInvalidArgument(st));
  }
}

TEST_CASE("kernels: box copies between views and dense memory move exactly the box's elements") {
  // Views of a part of a larger buffer (dense row-major over the buffer's shape, or with a
  // padded last axis, or a transposed last pair), boxes inside the view's extent: whole
  // trailing axes (one run per several rows) and partial ones, against element-by-element
  // copies.
  const uint64_t seed = 77;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    CAPTURE(seed);
    CAPTURE(trial);
    const int rank = static_cast<int>(rng() % 4) + 1;
    Shape buffer;
    for (int d = 0; d < rank; ++d) buffer.push_back(static_cast<int64_t>(rng() % 5) + 1);
    const int layout = static_cast<int>(rng() % 3);  // 0 dense, 1 padded last axis, 2 last two swapped
    TensorView view;
    view.dtype = DType::F32;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      view.strides[d] = stride;
      stride *= buffer[static_cast<size_t>(d)] + (layout == 1 && d == rank - 1 ? 3 : 0);
    }
    if (layout == 2 && rank >= 2) std::swap(view.strides[rank - 1], view.strides[rank - 2]);
    if (layout == 2 && rank >= 2) std::swap(buffer[static_cast<size_t>(rank - 1)], buffer[static_cast<size_t>(rank - 2)]);
    std::vector<float> memory(static_cast<size_t>(stride));
    for (size_t i = 0; i < memory.size(); ++i) memory[i] = static_cast<float>(i);
    view.data = memory.data();
    // The view's extent: the whole buffer or a part of it (its own begin per axis).
    std::vector<Interval> extent, box;
    for (int d = 0; d < rank; ++d) {
      const int64_t n = buffer[static_cast<size_t>(d)];
      const int64_t b = rng() % 2 == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      const int64_t e = rng() % 2 == 0 ? n : b + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - b));
      extent.push_back(Interval(b, e));
      const int64_t bb = rng() % 2 == 0 ? b : b + static_cast<int64_t>(rng() % static_cast<uint64_t>(e - b));
      const int64_t be = rng() % 2 == 0 ? e : bb + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(e - bb));
      box.push_back(Interval(bb, be));
    }
    view.extent = Box::of_rank(rank);
    Box b = Box::of_rank(rank);
    for (int d = 0; d < rank; ++d) {
      view.extent[d] = extent[static_cast<size_t>(d)];
      b[d] = box[static_cast<size_t>(d)];
    }
    // The view's element (index) lies at memory[offset(index)] from view.data.
    std::vector<float> expected;
    ref::for_each_index(b, [&](const int64_t* index) { expected.push_back(*view.at<const float>(index)); });
    std::vector<float> dense(expected.size(), -1.0f);
    copy_box_from_view(view, b, dense.data());
    CHECK(dense == expected);
    // Writing the box back with other values changes exactly its elements.
    std::vector<float> before = memory, values(expected.size());
    for (size_t i = 0; i < values.size(); ++i) values[i] = -static_cast<float>(i) - 1.0f;
    copy_box_to_view(view, b, values.data());
    size_t i = 0;
    ref::for_each_index(b, [&](const int64_t* index) {
      float* p = view.at<float>(index);
      CHECK(*p == values[i++]);
      *p = before[static_cast<size_t>(p - memory.data())];
    });
    CHECK(memory == before);
  }
}
