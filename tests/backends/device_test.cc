// Sessions on a device backend: the "devsim" plugin (backends/test_plugin/devsim_plugin.cc)
// keeps its buffers in memory the session cannot address and refuses host pointers, supports
// only a subset of ops, and runs the reference kernels. With the reference backend as fallback,
// every value must be bitwise equal to a reference-backend session: the explicit copies between
// host and device memory, device-resident kept values and the device arena lose nothing.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "backends/registry.h"
#include "engine/ops.h"
#include "engine/session.h"
#include "tests/session/random_graph.h"

using namespace tessera;
using namespace tessera::random_graph_testing;

namespace {

class PluginPath {
 public:
  PluginPath() {
    if (const char* old = std::getenv("TESSERA_BACKEND_PATH")) old_ = old, had_ = true;
    setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
  }
  ~PluginPath() { had_ ? setenv("TESSERA_BACKEND_PATH", old_.c_str(), 1) : unsetenv("TESSERA_BACKEND_PATH"); }

 private:
  std::string old_;
  bool had_ = false;
};

SessionOptions on_device(const std::string& fallback, int64_t budget = -1) {
  SessionOptions options;
  options.backend_name = "devsim";
  options.fallback_backend = fallback;
  options.cache_budget_bytes = budget;
  return options;
}

}  // namespace

TEST_CASE("device: random graphs on a device with a host fallback equal the reference backend bitwise") {
  PluginPath path;
  int64_t copies = 0, fallback_steps = 0, device_only_reads = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    Graph g;
    RandomGraph gen(g, rng);
    gen.grow(16);
    const auto& pool = gen.pool();
    g.output("out0", pool.back());
    g.output("out1", pool[static_cast<size_t>(rng() % pool.size())]);
    const int64_t budgets[] = {-1, 0, 512};
    const int64_t budget = budgets[rng() % 3];
    GraphSession device(g, on_device("reference", budget));
    SessionOptions reference_options;
    reference_options.backend = BackendKind::Reference;
    reference_options.cache_budget_bytes = budget;
    GraphSession reference(g, reference_options);
    for (int step = 0; step < 5; ++step) {
      CAPTURE(step);
      for (const InputSpec& in : gen.inputs()) {
        if (step > 0 && rng() % 2 == 0) continue;
        const Box box = step == 0 ? Box::full(in.shape) : random_box(in.shape, rng);
        const std::vector<std::byte> data = random_values(in, box.volume(), rng);
        device.write(in.name, box, data);
        reference.write(in.name, box, data);
      }
      const auto& [name, id] = g.outputs()[rng() % g.outputs().size()];
      const Node& out = g.node(id);
      const Box box = step == 0 ? Box::full(out.shape) : random_box(out.shape, rng);
      std::vector<std::byte> got(static_cast<size_t>(box.volume() * dtype_size(out.dtype)));
      std::vector<std::byte> want(got.size());
      device.read(name, box, got);
      reference.read(name, box, want);
      REQUIRE_MESSAGE(got == want, "device session differs from the reference backend, box ", box.to_string(), " of ",
                      name);
      copies += device.stats().copies;
      fallback_steps += device.stats().fallback_steps;
      device_only_reads += device.stats().steps > 0 && device.stats().fallback_steps == 0;
    }
  }
  // Both directions and both backends were exercised.
  CHECK(copies > 0);
  CHECK(fallback_steps > 0);
  CHECK(device_only_reads > 0);
}

TEST_CASE("device: a constant crosses once, a one-row write moves one row") {
  PluginPath path;
  Graph g;
  const int64_t rows = 8, k = 16, n = 12;
  std::vector<float> w(static_cast<size_t>(k * n));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  Tensor x = g.input("x", {rows, k}, DType::F32);
  Tensor weight = g.constant(Shape{k, n}, w);
  Tensor h = exp(matmul(x, weight));             // on the device
  Tensor c = cumsum(h, 1);                       // not a devsim op: on the host fallback
  g.output("y", tanh(c));                        // back on the device
  GraphSession s(g, on_device("cpu"));
  CHECK(s.fallback_ops() == std::vector<std::string>{"cumsum (1 node)"});
  std::vector<float> xs(static_cast<size_t>(rows * k));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 5) * 0.1f;
  s.write<float>("x", Box::full(Shape{rows, k}), xs);
  // explain names the backend of each node.
  const std::string why = s.explain("y", Box::full(Shape{rows, n})).to_string();
  CHECK(why.find("[devsim]") != std::string::npos);
  CHECK_MESSAGE(why.find("[cpu]") != std::string::npos, why);
  const std::vector<float> first = s.read<float>("y", Box::full(Shape{rows, n}));
  const int64_t row_bytes_x = k * 4, row_bytes_out = n * 4;
  // x and w in, h out to the host, cumsum's output in: all of each.
  CHECK(s.stats().copy_bytes == rows * row_bytes_x + k * n * 4 + 2 * rows * row_bytes_out);
  CHECK(s.stats().fallback_steps == 1);
  // One row of x changes: that row crosses, in and out; the constant does not cross again.
  std::vector<float> row(static_cast<size_t>(k), 0.3f);
  s.write<float>("x", Box{{3, 4}, {0, k}}, row);
  const std::vector<float> again = s.read<float>("y", Box{{3, 4}, {0, n}});
  CHECK(s.stats().copy_bytes == row_bytes_x + 2 * row_bytes_out);
  // The same values as the CPU backend alone (the device runs the reference kernels).
  GraphSession cpu(g);
  cpu.write<float>("x", Box::full(Shape{rows, k}), xs);
  cpu.write<float>("x", Box{{3, 4}, {0, k}}, row);
  const std::vector<float> want = cpu.read<float>("y", Box{{3, 4}, {0, n}});
  for (size_t i = 0; i < want.size(); ++i) CHECK(again[i] == doctest::Approx(want[i]).epsilon(1e-5));
}

TEST_CASE("device: a device backend needs a host fallback, bad configurations are Errors") {
  PluginPath path;
  Graph g;
  g.output("y", exp(g.input("x", {2, 3}, DType::F32)));
  CHECK_THROWS_WITH_AS(GraphSession(g, on_device("")), doctest::Contains("needs a host fallback backend"), Error);
  CHECK_THROWS_WITH_AS(GraphSession(g, on_device("devsim")), doctest::Contains("must be a host backend"), Error);
  CHECK_THROWS_WITH_AS(GraphSession(g, on_device("nonesuch")), doctest::Contains("nonesuch"), Error);
}

TEST_CASE("device: sessions on one pool share the backend and upload each constant once") {
  PluginPath path;
  Graph g;
  std::vector<float> w(16 * 8);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) * 0.125f;
  Tensor x = g.input("x", {4, 16}, DType::F32);
  g.output("y", exp(matmul(x, g.constant(Shape{16, 8}, w))));
  auto pool = MemoryPool::create();
  SessionOptions options = on_device("cpu");
  options.pool = pool;
  GraphSession a(g, options), b(g, options);
  CHECK(&a.backend() == &b.backend());
  const std::vector<float> xs(64, 0.25f);
  for (GraphSession* s : {&a, &b}) {
    s->write<float>("x", Box::full(Shape{4, 16}), xs);
    s->read<float>("y", Box::full(Shape{4, 8}));
  }
  CHECK(a.stats().copy_bytes == 64 * 4 + 16 * 8 * 4);  // x and the weight
  CHECK(b.stats().copy_bytes == 64 * 4);               // x only: the weight is on the device
  CHECK(pool->stats().device_weight_bytes == 16 * 8 * 4);
}
