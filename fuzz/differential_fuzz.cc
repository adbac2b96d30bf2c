// libFuzzer target: differential check of incremental execution. The bytes seed a random graph
// (tests/session/random_graph.h: the whole op list over inputs x, y, z, ids), a cache budget
// and thread count, then drive a sequence of partial writes and partial reads. Every read must
// be bitwise equal to a fresh session computing the full graph from the same inputs; an Error
// from one must be an Error from the other.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "tests/session/random_graph.h"

namespace {

using namespace tessera;
using namespace tessera::random_graph_testing;

Box take_box(FuzzedDataProvider& in, const Shape& shape) {
  Box b = Box::of_rank(static_cast<int>(shape.size()));
  for (int d = 0; d < b.rank(); ++d) {
    const int64_t n = shape[static_cast<size_t>(d)];
    const int64_t a = in.ConsumeIntegralInRange<int64_t>(0, n);
    const int64_t c = in.ConsumeIntegralInRange<int64_t>(0, n);
    b[d] = Interval(std::min(a, c), std::max(a, c));
  }
  return b;
}

[[noreturn]] void finding(const char* what, const std::string& name, const Box& box) {
  std::fprintf(stderr, "differential_fuzz: %s (output %s, box %s)\n", what, name.c_str(), box.to_string().c_str());
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::mt19937_64 rng(in.ConsumeIntegral<uint64_t>());
  Graph g;
  RandomGraph gen(g, rng);
  gen.grow(in.ConsumeIntegralInRange<int>(1, 24));
  const auto& pool = gen.pool();
  for (int k = 0; k < 3; ++k)
    g.output("out" + std::to_string(k), pool[pool.size() - 1 - in.ConsumeIntegralInRange<size_t>(0, pool.size() - 1)]);

  SessionOptions options;
  const int64_t budgets[] = {-1, 0, 64, 256, 4096};
  options.cache_budget_bytes = budgets[in.ConsumeIntegralInRange<int>(0, 4)];
  options.threads = in.ConsumeIntegralInRange<int>(1, 2);
  options.fuse = in.ConsumeBool();
  GraphSession session(g, options);
  std::vector<std::vector<std::byte>> current;
  for (const InputSpec& spec : gen.inputs()) {
    current.push_back(random_values(spec, shape_volume(spec.shape), rng));
    session.write(spec.name, Box::full(spec.shape), current.back());
  }
  while (in.remaining_bytes() > 0) {
    if (in.ConsumeBool()) {  // a partial write
      const size_t k = in.ConsumeIntegralInRange<size_t>(0, gen.inputs().size() - 1);
      const InputSpec& spec = gen.inputs()[k];
      const Box box = take_box(in, spec.shape);
      const std::vector<std::byte> values = random_values(spec, box.volume(), rng);
      session.write(spec.name, box, values);
      scatter(current[k], spec.shape, box, values, 4);
      continue;
    }
    const auto& [name, id] = g.outputs()[in.ConsumeIntegralInRange<size_t>(0, g.outputs().size() - 1)];
    const Node& out = g.node(id);
    const int esize = dtype_size(out.dtype);
    const Box box = take_box(in, out.shape);
    std::vector<std::byte> got(static_cast<size_t>(box.volume() * esize));
    bool got_error = false, want_error = false;
    try {
      session.read(name, box, got);
    } catch (const Error&) {
      got_error = true;
    }
    GraphSession fresh(g, SessionOptions{.threads = 1});
    for (size_t k = 0; k < gen.inputs().size(); ++k)
      fresh.write(gen.inputs()[k].name, Box::full(gen.inputs()[k].shape), current[k]);
    std::vector<std::byte> full(static_cast<size_t>(out.volume() * esize));
    try {
      fresh.read(name, Box::full(out.shape), full);
    } catch (const Error&) {
      want_error = true;
    }
    if (got_error != want_error) finding("an Error in one session only", name, box);
    if (got_error) continue;
    const std::vector<std::byte> want = extract(full, out.shape, box, esize);
    if (got.size() != want.size() || (!got.empty() && std::memcmp(got.data(), want.data(), got.size()) != 0))
      finding("incremental read differs from a fresh full computation", name, box);
  }
  return 0;
}
