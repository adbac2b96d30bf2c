// Random-graph differential test: random DAGs drawn from the whole op list, random partial
// writes and partial reads; every incremental read must be bitwise equal to a fresh session's
// full computation.
#include "tests/session/random_graph.h"

#include <doctest/doctest.h>

#include <cstring>
#include <random>

using namespace tessera;

namespace {

using namespace tessera::random_graph_testing;

void run_case(uint64_t seed, uint32_t* kinds_seen) {
  std::mt19937_64 rng(seed);
  Graph g;
  RandomGraph gen(g, rng);
  gen.grow(20);
  REQUIRE(gen.computed_nodes() >= 20);
  *kinds_seen |= gen.kinds_used();
  // Outputs: the last tensor and two others.
  const auto& pool = gen.pool();
  g.output("out0", pool.back());
  g.output("out1", pool[pool.size() - 2]);
  g.output("out2", pool[static_cast<size_t>(rng() % pool.size())]);

  SessionOptions options;
  int64_t budgets[] = {-1, -1, 0, 256, 2048};
  options.cache_budget_bytes = budgets[rng() % 5];
  GraphSession session(g, options);
  std::vector<std::vector<std::byte>> current;
  for (const InputSpec& in : gen.inputs()) {
    current.push_back(random_values(in, shape_volume(in.shape), rng));
    session.write(in.name, Box::full(in.shape), current.back());
  }
  for (int step = 0; step < 6; ++step) {
    CAPTURE(seed);
    CAPTURE(step);
    // A random partial write (sometimes two).
    for (int w = 0; w < 1 + static_cast<int>(rng() % 2); ++w) {
      size_t k = rng() % gen.inputs().size();
      const InputSpec& in = gen.inputs()[k];
      Box box = random_box(in.shape, rng);
      std::vector<std::byte> data = random_values(in, box.volume(), rng);
      session.write(in.name, box, data);
      scatter(current[k], in.shape, box, data, 4);  // mirror into the full copy
    }
    // A random partial read, compared with a fresh session's full computation.
    const auto& [name, id] = g.outputs()[rng() % g.outputs().size()];
    const Node& out = g.node(id);
    Box box = random_box(out.shape, rng);
    std::vector<std::byte> got(static_cast<size_t>(box.volume() * 4));
    session.read(name, box, got);
    GraphSession fresh(g);
    for (size_t k = 0; k < gen.inputs().size(); ++k)
      fresh.write(gen.inputs()[k].name, Box::full(gen.inputs()[k].shape), current[k]);
    std::vector<std::byte> full(static_cast<size_t>(out.volume() * 4));
    fresh.read(name, Box::full(out.shape), full);
    std::vector<std::byte> want = extract(full, out.shape, box, 4);
    REQUIRE_MESSAGE(std::memcmp(got.data(), want.data(), got.size()) == 0,
                    "incremental read differs from a fresh full computation, box ", box.to_string(),
                    " of ", name);
  }
}

}  // namespace

TEST_CASE("session: random graphs, incremental reads bitwise equal to fresh full computation") {
  uint32_t kinds_seen = 0;
  for (uint64_t seed = 1; seed <= 2000; ++seed) run_case(seed, &kinds_seen);
  // Every op family of the generator was drawn at least once.
  CHECK(kinds_seen == (1u << RandomGraph::kOps) - 1);
}
