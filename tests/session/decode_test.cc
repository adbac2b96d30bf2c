// Decode and prompt-edit behaviour on a 2-layer causal transformer: the KV cache falls out of
// region tracking, and edits reuse the unchanged prefix.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "engine/op_def.h"
#include "engine/session.h"
#include "examples/tiny_transformer.h"
#include "tests/support/fresh.h"

using namespace tessera;
using namespace tessera::examples;
using namespace tessera::testing;

namespace {

// Elements in one row (index along axis 0) of a node.
int64_t row_elements(const Node& n) { return n.shape.empty() ? 1 : n.volume() / n.shape[0]; }

}  // namespace

TEST_CASE("session: decode computes one row of every node and matches a fresh session bitwise") {
  TinyConfig config;
  config.capacity = 48;
  Graph g;
  TinyModel model = build_tiny_transformer(g, config);
  GraphSession s(g);
  std::vector<int32_t> tokens = {1, 5, 9, 2, 33, 7, 11, 4};
  s.write("ids", Box{{0, static_cast<int64_t>(tokens.size())}}, tokens);
  std::vector<float> logits =
      s.read<float>("logits", Box{{static_cast<int64_t>(tokens.size()) - 1, static_cast<int64_t>(tokens.size())}, {0, config.vocab}});
  for (int step = 0; step < 12; ++step) {
    CAPTURE(step);
    const int64_t t = static_cast<int64_t>(tokens.size());
    tokens.push_back(argmax_row(logits));
    s.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{tokens.back()});
    logits = s.read<float>("logits", Box{{t, t + 1}, {0, config.vocab}});
    const SessionStats& st = s.stats();
    int64_t total = 0;
    for (NodeId id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      const int64_t computed = st.elements_per_node[static_cast<size_t>(id)];
      total += computed;
      CAPTURE(op_display_name(n));
      CHECK(computed <= row_elements(n));
      // Whatever was computed is (part of) row t.
      if (computed > 0) {
        Box row = Box::full(n.shape);
        row[0] = Interval(t, t + 1);
        CHECK(s.valid_region(id).contains(row));
      }
    }
    CHECK(total > 0);
    // K and V rows of earlier steps were reused, not recomputed.
    for (const Tensor& k : model.keys) CHECK(st.elements_per_node[static_cast<size_t>(k.id)] == row_elements(k.node()));
    std::vector<float> want = fresh_logits(g, tokens, t, config.vocab);
    REQUIRE(std::memcmp(want.data(), logits.data(), want.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("session: editing token p of a 64-token prompt recomputes only rows >= p") {
  TinyConfig config;
  config.capacity = 64;
  Graph g;
  TinyModel model = build_tiny_transformer(g, config);
  std::mt19937_64 rng(3);
  std::vector<int32_t> tokens(64);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(config.vocab));
  GraphSession s(g);
  s.write("ids", Box{{0, 64}}, tokens);
  const Box all{{0, 64}, {0, config.vocab}};
  s.read<float>("logits", all);
  std::vector<bool> depends_on_ids(static_cast<size_t>(g.size()), false);
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    depends_on_ids[static_cast<size_t>(id)] = n.kind == OpKind::Input && n.attrs_as<InputAttrs>().name == "ids";
    for (NodeId in : n.inputs) depends_on_ids[static_cast<size_t>(id)] = depends_on_ids[static_cast<size_t>(id)] || depends_on_ids[static_cast<size_t>(in)];
  }
  for (int64_t p : {0, 17, 40, 63}) {
    CAPTURE(p);
    tokens[static_cast<size_t>(p)] = (tokens[static_cast<size_t>(p)] + 1) % static_cast<int32_t>(config.vocab);
    s.write("ids", Box{{p, p + 1}}, std::vector<int32_t>{tokens[static_cast<size_t>(p)]});
    // The write leaves every row before p valid...
    for (NodeId id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      if (n.shape.empty() || n.shape[0] != 64 || s.is_fused_away(id)) continue;  // fused: never has values
      Box prefix = Box::full(n.shape);
      prefix[0] = Interval(0, p);
      CAPTURE(op_display_name(n));
      CHECK(s.valid_region(id).contains(prefix));
    }
    // ...so the read computes at most rows [p, 64) of each node, and all of them past attention.
    std::vector<float> logits = s.read<float>("logits", all);
    for (NodeId id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      const int64_t computed = s.stats().elements_per_node[static_cast<size_t>(id)];
      CAPTURE(op_display_name(n));
      if (!depends_on_ids[static_cast<size_t>(id)] || n.kind == OpKind::Input) {
        CHECK(computed == 0);
        continue;
      }
      CHECK(computed <= (64 - p) * row_elements(n));
    }
    CHECK(s.stats().elements_per_node[static_cast<size_t>(model.logits.id)] == (64 - p) * config.vocab);
    GraphSession fresh(g);
    fresh.write("ids", Box{{0, 64}}, tokens);
    std::vector<float> want = fresh.read<float>("logits", all);
    REQUIRE(std::memcmp(want.data(), logits.data(), want.size() * sizeof(float)) == 0);
  }
}
