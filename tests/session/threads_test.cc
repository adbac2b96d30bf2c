// Results never depend on the thread count: the CPU backend's team splits steps into tiles, and
// every kernel computes an element the same way whatever tile it is given. Random graphs with
// large shapes (vector bodies, tails, quantised linear layers, attention) run with 1, 2 and 3
// threads in one process, through the same writes and reads, and must agree bit for bit.
#include <doctest/doctest.h>

#include <random>

#include "tests/session/random_graph.h"

using namespace tessera;
using namespace tessera::random_graph_testing;

TEST_CASE("session: random graphs give the same bits with 1, 2 and 3 threads") {
  for (uint64_t seed = 100; seed < 112; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    Graph g;
    RandomGraphConfig config{.rows_lo = 64, .rows_hi = 200, .cols_lo = 64, .cols_hi = 200, .cols_step = 1,
                             .linear = true, .scale_weights = true};
    RandomGraph gen(g, rng, config);
    gen.grow(10);
    for (int i = 0; i < 20 && !gen.try_add(RandomGraph::kAttention); ++i) {
    }
    gen.grow(gen.computed_nodes() + 3);
    g.output("out", gen.pool().back());
    g.output("mid", gen.pool()[gen.pool().size() / 2]);
    std::vector<std::unique_ptr<GraphSession>> sessions;
    for (int threads : {1, 2, 3}) sessions.push_back(std::make_unique<GraphSession>(g, SessionOptions{.threads = threads}));
    for (const InputSpec& in : gen.inputs()) {
      const std::vector<std::byte> values = random_values(in, shape_volume(in.shape), rng);
      for (auto& s : sessions) s->write(in.name, Box::full(in.shape), values);
    }
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      for (const auto& [name, id] : g.outputs()) {
        const Node& out = g.node(id);
        const Box box = round == 0 ? Box::full(out.shape) : random_box(out.shape, rng);
        std::vector<std::byte> first;
        for (size_t k = 0; k < sessions.size(); ++k) {
          std::vector<std::byte> got(static_cast<size_t>(box.volume() * dtype_size(out.dtype)));
          sessions[k]->read(name, box, got);
          if (k == 0) first = got;
          else CHECK(got == first);
        }
      }
      // A partial write of one input, the same for all.
      const InputSpec& in = gen.inputs()[rng() % gen.inputs().size()];
      const Box box = random_box(in.shape, rng);
      const std::vector<std::byte> values = random_values(in, box.volume(), rng);
      for (auto& s : sessions) s->write(in.name, box, values);
    }
  }
}

TEST_CASE("session: a profiled session gives the same bits and times every step it runs") {
  std::mt19937_64 rng(7);
  Graph g;
  RandomGraphConfig config{.rows_lo = 32, .rows_hi = 80, .cols_lo = 32, .cols_hi = 80, .cols_step = 1, .linear = true,
                           .scale_weights = true};
  RandomGraph gen(g, rng, config);
  gen.grow(12);
  g.output("out", gen.pool().back());
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    GraphSession plain(g, SessionOptions{.threads = threads});
    GraphSession profiled(g, SessionOptions{.threads = threads, .profile = true});
    for (const InputSpec& in : gen.inputs()) {
      const std::vector<std::byte> values = random_values(in, shape_volume(in.shape), rng);
      plain.write(in.name, Box::full(in.shape), values);
      profiled.write(in.name, Box::full(in.shape), values);
    }
    const Node& out = gen.pool().back().node();
    int64_t steps = 0;
    for (int round = 0; round < 3; ++round) {
      const Box box = round == 0 ? Box::full(out.shape) : random_box(out.shape, rng);
      std::vector<std::byte> a(static_cast<size_t>(box.volume() * dtype_size(out.dtype))), b = a;
      plain.read("out", box, a);
      profiled.read("out", box, b);
      CHECK(a == b);
      steps += profiled.stats().steps;
      const InputSpec& in = gen.inputs()[rng() % gen.inputs().size()];
      const Box part = random_box(in.shape, rng);
      const std::vector<std::byte> values = random_values(in, part.volume(), rng);
      plain.write(in.name, part, values);
      profiled.write(in.name, part, values);
    }
    CHECK(plain.stats().profile.empty());
    int64_t profiled_steps = 0;
    double seconds = 0;
    for (const auto& [name, op] : profiled.stats().profile) {
      CAPTURE(name);
      CHECK(op.steps > 0);
      CHECK(op.seconds >= 0);
      profiled_steps += op.steps;
      seconds += op.seconds;
    }
    CHECK(profiled_steps == steps);  // every step that ran, once
    CHECK(seconds > 0);
    profiled.clear_profile();
    CHECK(profiled.stats().profile.empty());
  }
}

TEST_CASE("session: the profile counts a read's steps, not the constants folded at creation") {
  Graph g;
  Tensor x = g.input("x", {5, 6}, DType::F32);
  std::vector<float> w(24);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i) - 3.0f;
  Tensor wt = cast(cast(transpose(g.constant({4, 6}, w), 0, 1), DType::F16), DType::F32);  // folded
  g.output("y", exp(matmul(x, wt)));
  GraphSession s(g, SessionOptions{.threads = 1, .profile = true});
  REQUIRE(s.stats().folded_nodes == 1);
  CHECK(s.stats().profile.empty());
  s.write<float>("x", Box{{0, 5}, {0, 6}}, std::vector<float>(30, 0.125f));
  s.read<float>("y", Box{{0, 5}, {0, 4}});
  int64_t steps = 0;
  for (const auto& [name, op] : s.stats().profile) {
    CAPTURE(name);
    CHECK(name.rfind("cast", 0) != 0);  // the folded casts never ran in a read
    steps += op.steps;
  }
  CHECK(steps == s.stats().steps);
}
