// Session passes (verify, fold, cse), the memory plan and explain.
#include <doctest/doctest.h>

#include <string>

#include "engine/ops.h"
#include "engine/session.h"
#include "planner/memory_plan.h"
#include "planner/plan.h"
#include "planner/passes.h"

using namespace tessera;

namespace {

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int64_t>(i % 7) - 3);
  return v;
}

}  // namespace

TEST_CASE("planner: passes are listed in the order they run") {
  std::vector<std::string> names;
  for (const PassInfo& p : planner_passes()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"verify", "fuse_patterns", "fold", "cse", "fuse_elementwise",
                                          "conv_tiles", "region_analysis", "plan_lookup",
                                          "kernel_choice", "memory_plan"});
}

TEST_CASE("planner: constant subgraphs are folded once at session creation, bitwise as unfolded") {
  // A weight transposed and cast at run time: the fold pass computes it when the session is made.
  auto build = [](Graph& g, bool weight_is_input) {
    Tensor x = g.input("x", {5, 6}, DType::F32);
    Tensor w = weight_is_input ? g.input("w", {4, 6}, DType::F32) : g.constant({4, 6}, ramp(24, 0.25f));
    Tensor wt = cast(cast(transpose(w, 0, 1), DType::F16), DType::F32);
    g.output("y", matmul(x, wt));
    return wt;
  };
  Graph folded_graph, plain_graph;
  Tensor wt = build(folded_graph, false);
  build(plain_graph, true);
  GraphSession folded(folded_graph), plain(plain_graph);
  CHECK(folded.stats().folded_nodes == 1);  // the outer cast: the frontier of the constant subgraph
  CHECK(folded.stats().folded_bytes == 6 * 4 * 4);
  CHECK(plain.stats().folded_nodes == 0);
  plain.write("w", Box{{0, 4}, {0, 6}}, ramp(24, 0.25f));
  for (GraphSession* s : {&folded, &plain}) s->write("x", Box{{0, 5}, {0, 6}}, ramp(30, 0.5f));
  std::vector<float> a = folded.read<float>("y", Box{{0, 5}, {0, 4}});
  CHECK(folded.stats().elements_per_node[static_cast<size_t>(wt.id)] == 0);
  CHECK(folded.stats().elements_computed == 5 * 4);  // the matmul only
  CHECK(a == plain.read<float>("y", Box{{0, 5}, {0, 4}}));
  CHECK(folded.valid_region(wt.id) == Region::full(wt.shape()));
  // Kept bytes count computed node values, not folded weights.
  CHECK(folded.kept_bytes() == 5 * 4 * 4);
}

TEST_CASE("planner: cse merges folded values that are equal, and the nodes that read them") {
  Graph g;
  Tensor x = g.input("x", {3, 4}, DType::F32);
  Tensor w = g.constant({4, 4}, ramp(16, 1.0f));
  Tensor direct = matmul(x, w);
  Tensor roundabout = matmul(x, transpose(transpose(w, 0, 1), 0, 1));
  g.output("direct", direct);
  g.output("roundabout", roundabout);
  GraphSession s(g);
  CHECK(s.stats().merged_nodes == 2);  // the double transpose (equal bytes to w) and its matmul
  s.write("x", Box{{0, 3}, {0, 4}}, ramp(12, 0.5f));
  std::vector<float> a = s.read<float>("direct", Box{{0, 3}, {0, 4}});
  CHECK(s.stats().elements_computed == 12);
  std::vector<float> b = s.read<float>("roundabout", Box{{0, 3}, {0, 4}});
  CHECK(s.stats().elements_computed == 0);  // the same value, already valid
  CHECK(a == b);
  CHECK(s.valid_region(roundabout.id) == s.valid_region(direct.id));
}

TEST_CASE("planner: the memory plan reuses dead blocks and writes elementwise steps in place") {
  // A chain of five 1000-byte transients, each read only by the next.
  std::vector<BufferRequest> chain;
  for (int32_t i = 0; i < 5; ++i) chain.push_back(BufferRequest{i, 1000, i + 1 < 5 ? i + 1 : 5, -1});
  MemoryPlan separate = plan_memory(chain);
  CHECK(separate.arena_bytes == 2 * 1024);  // two live at a time, 64-byte aligned
  CHECK(separate.in_place_steps == 0);
  for (int32_t i = 1; i < 5; ++i) chain[static_cast<size_t>(i)].in_place_of = i - 1;
  MemoryPlan in_place = plan_memory(chain);
  CHECK(in_place.arena_bytes == 1024);
  CHECK(in_place.in_place_steps == 4);
  for (const BufferPlacement& p : in_place.placements) CHECK(p.offset == 0);
  // Kept values take no arena; a value read late stays live until then.
  std::vector<BufferRequest> mixed = {{0, 640, 3, -1}, {1, 0, 2, -1}, {2, 640, 3, -1}, {3, 640, 4, -1}};
  MemoryPlan m = plan_memory(mixed);
  CHECK(m.placements[1].offset == -1);
  CHECK(m.placements[0].offset != m.placements[2].offset);
  CHECK(m.placements[3].offset != m.placements[0].offset);
  CHECK(m.placements[3].offset != m.placements[2].offset);
}

TEST_CASE("planner: transients of a long elementwise chain share a small arena, results unchanged") {
  Graph g;
  Tensor x = g.input("x", {64, 33}, DType::F32);
  Tensor y = x;
  for (int i = 0; i < 12; ++i) y = (i % 2 == 0) ? tanh(y) : y * x;
  g.output("y", y);
  GraphSession transient(g), kept(g);
  for (NodeId id = 0; id < g.size(); ++id) transient.set_keep(id, Keep::Never);
  for (GraphSession* s : {&transient, &kept}) s->write("x", Box{{0, 64}, {0, 33}}, ramp(64 * 33, 0.1f));
  std::vector<float> a = transient.read<float>("y", Box{{0, 64}, {0, 33}});
  CHECK(a == kept.read<float>("y", Box{{0, 64}, {0, 33}}));
  // Twelve 64x33 f32 transients; with reuse and in-place steps the arena holds about two.
  CHECK(transient.stats().arena_bytes <= 3 * 64 * 33 * 4);
  CHECK(transient.kept_bytes() == 0);
}

TEST_CASE("planner: a reshape over its dying input's run of elements takes over its block") {
  Graph g;
  Tensor x = g.input("x", {6, 12}, DType::F32);
  Tensor a = tanh(x);
  Tensor r = reshape(a, {6, 3, 4});
  Tensor y = tanh(r);
  g.output("y", y);
  const std::vector<uint8_t> transient(static_cast<size_t>(g.size()), 0);
  // The plan of reading y over `out` (a row-major [6, 3, 4] box) when a is needed over `in`.
  auto reshape_in_place = [&](const Box& in, const Box& out) {
    std::vector<Step> steps(3);
    steps[0].node = a.id;
    steps[0].compute = Region(in);
    steps[1].node = r.id;
    steps[1].compute = Region(out);
    steps[2].node = y.id;
    steps[2].compute = Region(out);
    std::unique_ptr<Plan> plan = compile_plan(g, plan_pattern(g, 0, "cpu", y.id, steps, transient));
    REQUIRE(plan != nullptr);
    return plan->steps[1].in_place;
  };
  // Rows, or heads of one row: the same elements in the same order on both sides.
  CHECK(reshape_in_place(Box{{2, 3}, {0, 12}}, Box{{2, 3}, {0, 3}, {0, 4}}));
  CHECK(reshape_in_place(Box{{1, 4}, {0, 12}}, Box{{1, 4}, {0, 3}, {0, 4}}));
  CHECK(reshape_in_place(Box{{2, 3}, {4, 8}}, Box{{2, 3}, {1, 2}, {0, 4}}));
  // One head of several rows: a's dense box holds other elements between the rows.
  CHECK_FALSE(reshape_in_place(Box{{0, 4}, {4, 8}}, Box{{0, 4}, {1, 2}, {0, 4}}));
  CHECK(reshape_in_place(Box{{2, 3}, {0, 8}}, Box{{2, 3}, {0, 2}, {0, 4}}));

  // Reads through in-place reshapes give the bits of a session that keeps every value.
  GraphSession none(g), all(g);
  for (NodeId id = 0; id < g.size(); ++id) none.set_keep(id, Keep::Never);
  for (NodeId id = 0; id < g.size(); ++id) all.set_keep(id, Keep::Always);
  for (GraphSession* s : {&none, &all}) s->write("x", Box{{0, 6}, {0, 12}}, ramp(6 * 12, 0.3f));
  for (const Box& box : {Box{{2, 3}, {0, 3}, {0, 4}}, Box{{2, 3}, {1, 2}, {0, 4}}, Box{{0, 4}, {1, 2}, {0, 4}},
                         Box{{1, 5}, {0, 3}, {2, 4}}, Box{{0, 6}, {0, 3}, {0, 4}}}) {
    CAPTURE(box.to_string());
    CHECK(none.read<float>("y", box) == all.read<float>("y", box));
  }

  // A scalar: the one element is the same run on both sides.
  Graph h;
  Tensor s = h.input("s", {1}, DType::F32);
  Tensor t = tanh(s);
  Tensor scalar_of_t = reshape(t, {});
  Tensor z = tanh(scalar_of_t);
  h.output("z", z);
  std::vector<Step> steps(3);
  steps[0].node = t.id;
  steps[0].compute = Region(Box{{0, 1}});
  steps[1].node = scalar_of_t.id;
  steps[1].compute = Region(Box::of_rank(0));
  steps[2].node = z.id;
  steps[2].compute = Region(Box::of_rank(0));
  const std::vector<uint8_t> none_kept(static_cast<size_t>(h.size()), 0);
  std::unique_ptr<Plan> plan = compile_plan(h, plan_pattern(h, 0, "cpu", z.id, steps, none_kept));
  REQUIRE(plan != nullptr);
  CHECK(plan->steps[1].in_place);
  SessionOptions nothing_kept;
  nothing_kept.cache_budget_bytes = 0;
  GraphSession scalar(h, nothing_kept), kept_scalar(h);
  for (GraphSession* session : {&scalar, &kept_scalar}) session->write<float>("s", Box{{0, 1}}, std::vector<float>{0.7f});
  CHECK(scalar.read<float>("z", Box::of_rank(0)) == kept_scalar.read<float>("z", Box::of_rank(0)));
}

TEST_CASE("planner: explain says what a read would compute and why, running nothing") {
  Graph g;
  Tensor a = g.input("a", {6, 4}, DType::F32);
  Tensor b = exp(a);
  Tensor c = sum(b, {1});
  g.output("c", c);
  GraphSession s(g);
  s.write("a", Box{{0, 6}, {0, 4}}, ramp(24, 0.1f));
  Explanation first = s.explain("c", Box{{0, 6}});
  CHECK(first.elements == 6 * 4 + 6);
  REQUIRE(first.entries.size() == 3);
  CHECK(first.entries[1].why == "never computed");
  CHECK(s.valid_region(b.id).empty());  // nothing ran
  s.read<float>("c", Box{{0, 6}});
  s.write("a", Box{{2, 3}, {0, 4}}, std::vector<float>(4, 1.f));
  Explanation after = s.explain("c", Box{{0, 6}});
  CHECK(after.elements == 4 + 1);
  CHECK(after.entries[1].compute == Region(Box{{2, 3}, {0, 4}}));
  CHECK(after.entries[1].want == after.entries[1].compute);  // only the dirty row is wanted of b
  CHECK(after.entries[2].valid_elements == 5);                 // c: five rows still valid
  CHECK(after.entries[2].why.find("write #2 to 'a' [2:3, 0:4]") != std::string::npos);
  CHECK(after.to_string().find("compute") != std::string::npos);
  // The log holds the last 64 writes, the newest replacing the oldest: after 70 more writes
  // (#3 to #72, each read back), the last one is the one named.
  for (int i = 0; i < 70; ++i) {
    s.read<float>("c", Box{{0, 6}});
    s.write("a", Box{{i % 6, i % 6 + 1}, {0, 4}}, std::vector<float>(4, 0.5f));
  }
  Explanation wrapped = s.explain("c", Box{{0, 6}});
  REQUIRE(wrapped.entries.size() == 3);
  CHECK(wrapped.entries[2].why == "write #72 to 'a' [3:4, 0:4] dirtied it");
  // Rows 0 and 1 of c are valid: nothing below c is even looked at.
  CHECK(s.explain("c", Box{{0, 2}}).entries.size() == 1);
  CHECK(s.explain("c", Box{{0, 2}}).elements == 0);
  CHECK_THROWS_AS(s.explain("nope", Box{{0, 1}}), Error);
  CHECK_THROWS_AS(s.explain("c", Box{{0, 7}}), Error);
}
