// A session outliving or outgrowing its graph: nodes or outputs added after the session was
// created, the graph (or the LlmModel owning it) destroyed while the session lives. Each is an
// Error from the session (they used to overflow a heap buffer or read freed memory).
#include <memory>
#include <vector>

#include "doctest/doctest.h"
#include "engine/graph.h"
#include "engine/ops.h"
#include "engine/session.h"
#include "loaders/llm.h"
#include "tests/reliability/tiny_llm.h"

namespace tessera {
namespace {

struct Small {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  Tensor x, y;
  Small() {
    x = g->input("x", {4, 3}, DType::F32);
    y = sum(x * x + g->scalar(1.0f), {1});
    g->output("y", y);
  }
};

const std::vector<float> kX = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

TEST_CASE("reliability: nodes added to a graph after a session was created are an Error for it") {
  Small m;
  GraphSession s(*m.g);
  s.write("x", Box{{0, 4}, {0, 3}}, kX);
  const std::vector<float> before = s.read<float>("y", Box{{0, 4}});
  Tensor extra = m.x + m.x;  // the graph grows
  CHECK_THROWS_WITH_AS(s.read<float>("y", Box{{0, 4}}), doctest::Contains("create a new session"), Error);
  CHECK_THROWS_WITH_AS(s.write("x", Box{{0, 1}, {0, 3}}, std::vector<float>{1, 2, 3}), doctest::Contains("[session]"),
                       Error);
  CHECK_THROWS_AS(s.explain("y", Box{{0, 4}}), Error);
  CHECK_THROWS_AS(s.is_folded(m.y.id), Error);
  // A session created now sees the new node and agrees with the old values.
  m.g->output("extra", extra);
  GraphSession fresh(*m.g);
  fresh.write("x", Box{{0, 4}, {0, 3}}, kX);
  CHECK(fresh.read<float>("y", Box{{0, 4}}) == before);
  CHECK(fresh.read<float>("extra", Box{{0, 1}, {0, 3}}) == std::vector<float>{2, 4, 6});
}

TEST_CASE("reliability: outputs named after a session was created are unknown to it") {
  Small m;
  GraphSession s(*m.g);
  s.write("x", Box{{0, 4}, {0, 3}}, kX);
  m.g->output("again", m.y);  // no new node: the session stays usable
  CHECK_THROWS_WITH_AS(s.read<float>("again", Box{{0, 4}}), doctest::Contains("unknown output 'again'"), Error);
  CHECK(s.read<float>("y", Box{{0, 4}}).size() == 4);
}

TEST_CASE("reliability: a session whose graph was destroyed refuses to run") {
  Small m;
  auto s = std::make_unique<GraphSession>(*m.g);
  s->write("x", Box{{0, 4}, {0, 3}}, kX);
  CHECK(s->read<float>("y", Box{{0, 2}}).size() == 2);
  const NodeId y = m.y.id;
  m.g.reset();
  CHECK_THROWS_WITH_AS(s->read<float>("y", Box{{0, 4}}), doctest::Contains("destroyed"), Error);
  CHECK_THROWS_WITH_AS(s->write("x", Box{{0, 1}, {0, 3}}, std::vector<float>{1, 2, 3}), doctest::Contains("destroyed"),
                       Error);
  CHECK_THROWS_AS(s->explain("y", Box{{0, 4}}), Error);
  CHECK_THROWS_AS(s->is_folded(y), Error);
  CHECK_THROWS_AS(s->is_fused_away(y), Error);
  CHECK_THROWS_AS(s->set_keep(y, Keep::Always), Error);
  ReadPattern pattern{{{"x", Box{{0, 1}, {0, 3}}}}, "y", Box{{0, 1}}};
  CHECK_THROWS_AS(s->compile_ahead(std::span<const ReadPattern>(&pattern, 1)), Error);
  s.reset();  // destroying the session afterwards is fine
}

TEST_CASE("reliability: a session of a destroyed LlmModel refuses to run") {
  testing::TinyLlm tiny;
  testing::TempFile file(tiny.build(), "tiny_llm_lifetime");
  auto model = LlmModel::load(file.path(), 8);
  std::unique_ptr<GraphSession> s = model->new_session();
  s->write("ids", Box{{0, 2}}, std::vector<int32_t>{1, 2});
  const int64_t vocab = model->config().vocab;
  const std::vector<float> row = s->read<float>("logits", Box{{1, 2}, {0, vocab}});
  model.reset();
  CHECK_THROWS_WITH_AS(s->read<float>("logits", Box{{1, 2}, {0, vocab}}), doctest::Contains("destroyed"), Error);
  CHECK_THROWS_AS(s->write("ids", Box{{2, 3}}, std::vector<int32_t>{3}), Error);
  s.reset();
  // The file still loads and gives the same values.
  auto again = LlmModel::load(file.path(), 8);
  GraphSession fresh(again->graph());
  fresh.write("ids", Box{{0, 2}}, std::vector<int32_t>{1, 2});
  CHECK(fresh.read<float>("logits", Box{{1, 2}, {0, vocab}}) == row);
}

}  // namespace
}  // namespace tessera
