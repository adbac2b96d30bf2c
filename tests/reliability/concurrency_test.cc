// Concurrency contract (engine/session.h): calls on sessions of one pool are serialised by the
// pool lock. One session driven from several threads, and several sessions on one small-budget
// pool driven from several threads, give exactly the values of a serial run. Run under TSan by
// `bash scripts/sanitize.sh tsan` (the names contain "threads").
#include <cstring>
#include <thread>
#include <vector>

#include "doctest/doctest.h"
#include "engine/graph.h"
#include "engine/ops.h"
#include "engine/session.h"

namespace tessera {
namespace {

constexpr int kThreads = 4;
constexpr int64_t kCols = 16;

// Row-wise model: row r of "y" depends on row r of "x" only, so a thread that owns a row can
// check its reads whatever the other threads do.
struct RowModel {
  Graph g;
  RowModel() {
    Tensor x = g.input("x", {kThreads, kCols}, DType::F32);
    Tensor w = g.constant({kCols, kCols}, [] {
      std::vector<float> v(kCols * kCols);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 0.125f;
      return v;
    }());
    Tensor h = softmax(matmul(x, w) + x, -1);
    g.output("y", h * h);
    g.output("total", sum(h, {0, 1}));
  }
};

std::vector<float> row_values(int row, int step) {
  std::vector<float> v(kCols);
  for (int64_t c = 0; c < kCols; ++c) v[static_cast<size_t>(c)] = static_cast<float>((row + 1) * (c - step)) * 0.01f;
  return v;
}

std::vector<float> fresh_row(const Graph& g, int row, int step) {
  GraphSession fresh(g, SessionOptions{.threads = 1});
  fresh.write("x", Box{{row, row + 1}, {0, kCols}}, row_values(row, step));
  return fresh.read<float>("y", Box{{row, row + 1}, {0, kCols}});
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("reliability: threads sharing one session are serialised and exact") {
  RowModel m;
  GraphSession s(m.g, SessionOptions{.threads = 2});
  std::vector<std::vector<std::vector<float>>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int row = 0; row < kThreads; ++row)
    threads.emplace_back([&, row] {
      for (int step = 0; step < 12; ++step) {
        s.write("x", Box{{row, row + 1}, {0, kCols}}, row_values(row, step));
        seen[static_cast<size_t>(row)].push_back(s.read<float>("y", Box{{row, row + 1}, {0, kCols}}));
        if (step % 4 == 0) (void)s.explain("total", Box{});
        if (step % 5 == 0) s.set_keep(m.g.find_output("y"), step % 2 ? Keep::Never : Keep::Auto);
        (void)s.read<float>("total", Box{});
      }
    });
  for (std::thread& t : threads) t.join();
  for (int row = 0; row < kThreads; ++row)
    for (int step = 0; step < 12; ++step) {
      CAPTURE(row);
      CAPTURE(step);
      CHECK(same_bits(seen[static_cast<size_t>(row)][static_cast<size_t>(step)], fresh_row(m.g, row, step)));
    }
  // The final state equals a fresh session given the final rows.
  GraphSession fresh(m.g);
  for (int row = 0; row < kThreads; ++row) fresh.write("x", Box{{row, row + 1}, {0, kCols}}, row_values(row, 11));
  CHECK(same_bits(s.read<float>("total", Box{}), fresh.read<float>("total", Box{})));
}

TEST_CASE("reliability: threads driving sessions on one small-budget pool are exact") {
  RowModel m;
  auto pool = MemoryPool::create(MemoryPoolOptions{.budget_bytes = 512});
  std::vector<std::unique_ptr<GraphSession>> sessions;
  for (int k = 0; k < kThreads; ++k)
    sessions.push_back(std::make_unique<GraphSession>(m.g, SessionOptions{.pool = pool, .threads = 1 + k % 2}));
  std::vector<std::vector<std::vector<float>>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k)
    threads.emplace_back([&, k] {
      GraphSession& s = *sessions[static_cast<size_t>(k)];
      for (int step = 0; step < 10; ++step) {
        const int row = (k + step) % kThreads;
        s.write("x", Box{{row, row + 1}, {0, kCols}}, row_values(row, step));
        seen[static_cast<size_t>(k)].push_back(s.read<float>("y", Box{{row, row + 1}, {0, kCols}}));
        (void)pool->stats();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < kThreads; ++k)
    for (int step = 0; step < 10; ++step) {
      CAPTURE(k);
      CAPTURE(step);
      CHECK(same_bits(seen[static_cast<size_t>(k)][static_cast<size_t>(step)],
                      fresh_row(m.g, (k + step) % kThreads, step)));
    }
  CHECK(pool->stats().sessions == kThreads);
}

}  // namespace
}  // namespace tessera
