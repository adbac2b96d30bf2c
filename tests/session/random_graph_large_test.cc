// Random-graph differential test at kernel-sized shapes (64..257 per dim, so SIMD bodies, tails
// and thread splits of the optimised CPU kernels run), with linear layers over block-quantised
// weights, in the cache configuration of an LLM session (loaders/llm.cc): every computed node
// transient (Keep::Never) except pinned K/V-like nodes (Keep::Always), inputs rewritten one row
// at a time like a decode loop. Every read must be bitwise equal to a fresh session's full
// computation on the same (CPU) backend.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "engine/op_def.h"
#include "tests/session/random_graph.h"

using namespace tessera;

namespace {

using namespace tessera::random_graph_testing;

bool is_computed(const Node& n) {
  return n.kind != OpKind::Input && n.kind != OpKind::Constant;
}

// Box of `shape` covering index `row` (modulo the extent) of dim 0 and everything else.
Box row_box(const Shape& shape, int64_t row) {
  Box b = Box::full(shape);
  if (!shape.empty()) b[0] = Interval(row % shape[0], row % shape[0] + 1);
  return b;
}

// Reads `box` of output `name` from `session` and from a fresh session over `current` inputs,
// and requires them bitwise equal.
void compare_read(const Graph& g, GraphSession& session, const std::vector<InputSpec>& inputs,
                  const std::vector<std::vector<std::byte>>& current, const std::string& name,
                  NodeId id, const Box& box) {
  const Node& out = g.node(id);
  std::vector<std::byte> got(static_cast<size_t>(box.volume() * 4));
  session.read(name, box, got);
  GraphSession fresh(g);
  for (size_t k = 0; k < inputs.size(); ++k)
    fresh.write(inputs[k].name, Box::full(inputs[k].shape), current[k]);
  std::vector<std::byte> full(static_cast<size_t>(out.volume() * 4));
  fresh.read(name, Box::full(out.shape), full);
  std::vector<std::byte> want = extract(full, out.shape, box, 4);
  REQUIRE_MESSAGE(std::memcmp(got.data(), want.data(), got.size()) == 0, "incremental read of ",
                  name, " box ", box.to_string(), " (", op_display_name(out), " ",
                  shape_string(out.shape), ") differs from a fresh full computation");
}

// One graph: a prompt written in full, then `steps` decode steps each rewriting row t of the
// row-indexed inputs and reading row t of the last output, plus a random box of another output
// every other step. Returns the op families drawn.
uint32_t run_case(uint64_t seed, int steps) {
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  Graph g;
  RandomGraphConfig config{.rows_lo = 64,
                           .rows_hi = 257,
                           .cols_lo = 64,
                           .cols_hi = 257,
                           .cols_step = 1,
                           .linear = true,
                           .scale_weights = true};
  RandomGraph gen(g, rng, config);
  gen.grow(8);
  // Every graph holds a causal attention (whose k and v are pinned) and a linear layer near the
  // end.
  for (int i = 0; i < 20 && !gen.try_add(RandomGraph::kAttention); ++i) {
  }
  gen.grow(gen.computed_nodes() + 2);
  // The forced linear layer cycles through the block formats with the seed.
  const DType weight_dtype = testing::kQuantizedDTypes[seed % std::size(testing::kQuantizedDTypes)];
  CAPTURE(dtype_name(weight_dtype));
  REQUIRE(gen.try_add_linear(weight_dtype));
  gen.grow(gen.computed_nodes() + 2);
  const auto& pool = gen.pool();
  g.output("out0", pool.back());
  g.output("out1", pool[static_cast<size_t>(rng() % pool.size())]);

  GraphSession session(g);
  std::vector<NodeId> pinned;
  for (const Tensor& t : gen.attention_kv())
    if (is_computed(t.node())) pinned.push_back(t.id);
  for (NodeId id = 0; id < g.size(); ++id)
    if (is_computed(g.node(id))) session.set_keep(id, Keep::Never);
  for (NodeId id : pinned) session.set_keep(id, Keep::Always);

  const std::vector<InputSpec>& inputs = gen.inputs();
  std::vector<std::vector<std::byte>> current;
  for (const InputSpec& in : inputs) {
    current.push_back(random_values(in, shape_volume(in.shape), rng));
    session.write(in.name, Box::full(in.shape), current.back());
  }
  const int64_t rows = inputs[0].shape[0];
  const int64_t prompt = std::uniform_int_distribution<int64_t>(1, rows - steps)(rng);
  const auto& outputs = g.outputs();
  // Prefill: rows [0, prompt) of the last output.
  {
    const Node& out = g.node(outputs[0].second);
    Box box = Box::full(out.shape);
    if (!out.shape.empty()) box[0] = Interval(0, std::min(prompt, out.shape[0]));
    compare_read(g, session, inputs, current, outputs[0].first, outputs[0].second, box);
  }
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const int64_t t = prompt + step;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (inputs[k].name == "z") continue;  // [cols]: not indexed by rows
      Box box = row_box(inputs[k].shape, t);
      std::vector<std::byte> data = random_values(inputs[k], box.volume(), rng);
      session.write(inputs[k].name, box, data);
      scatter(current[k], inputs[k].shape, box, data, 4);
    }
    compare_read(g, session, inputs, current, outputs[0].first, outputs[0].second,
                 row_box(g.node(outputs[0].second).shape, t));
    if (step % 2 == 1) {
      const Node& other = g.node(outputs[1].second);
      compare_read(g, session, inputs, current, outputs[1].first, outputs[1].second,
                   random_box(other.shape, rng));
    }
    // The cache configuration holds: transient nodes keep nothing, pinned ones stay kept.
    for (NodeId id = 0; id < g.size(); ++id) {
      if (!is_computed(g.node(id)) || session.is_folded(id)) continue;  // folded: constants now
      const bool is_pinned = std::find(pinned.begin(), pinned.end(), id) != pinned.end();
      CAPTURE(op_display_name(g.node(id)));
      if (is_pinned)
        CHECK(session.is_kept(id));
      else
        CHECK(session.valid_region(id).empty());
    }
  }
  // A prompt edit: rewriting row p dirties rows >= p of causal nodes; read them all.
  const int64_t p = std::uniform_int_distribution<int64_t>(0, prompt - 1)(rng);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].name == "z") continue;
    Box box = row_box(inputs[k].shape, p);
    std::vector<std::byte> data = random_values(inputs[k], box.volume(), rng);
    session.write(inputs[k].name, box, data);
    scatter(current[k], inputs[k].shape, box, data, 4);
  }
  const Node& out = g.node(outputs[0].second);
  Box edited = Box::full(out.shape);
  if (!out.shape.empty())
    edited[0] = Interval(std::min(p, out.shape[0] - 1), std::min(prompt + steps, out.shape[0]));
  compare_read(g, session, inputs, current, outputs[0].first, outputs[0].second, edited);
  return gen.kinds_used();
}

}  // namespace

TEST_CASE(
    "session: large random graphs with quantised linear layers, decode-style writes, bitwise equal "
    "to fresh") {
  uint32_t kinds_seen = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) kinds_seen |= run_case(seed, 8);
  CHECK((kinds_seen & (1u << RandomGraph::kLinear)) != 0);
  CHECK((kinds_seen & (1u << RandomGraph::kAttention)) != 0);
}
