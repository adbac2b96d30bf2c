// Attention: rules (the causal ones are what make the KV cache emerge), reference values and
// validation.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "engine/session.h"
#include "tests/ops/nn_test_util.h"

using namespace tessera;
using namespace tessera::testing;

// ---- attention -------------------------------------------------------------------------------

namespace {

// q [2, T, Hq, 3], k [2, S, Hkv, 3], v [2, S, Hkv, 5].
OpCase attention_case(std::string label, int64_t t, int64_t s, int64_t hq, int64_t hkv,
                      AttentionParams p) {
  return OpCase{std::move(label), [=](Graph& g) {
                  Tensor q = g.input("q", {2, t, hq, 3}, DType::F32);
                  Tensor k = g.input("k", {2, s, hkv, 3}, DType::F32);
                  return attention(q, k, g.input("v", {2, s, hkv, 5}, DType::F32), p);
                }};
}

// Straightforward attention over row-major q [T, Hq, D], k [S, Hkv, D], v [S, Hkv, Dv].
std::vector<double> naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                    const std::vector<double>& v, int64_t t_size, int64_t s_size,
                                    int64_t hq, int64_t hkv, int64_t d, int64_t dv,
                                    const AttentionParams& p) {
  std::vector<double> out;
  for (int64_t t = 0; t < t_size; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / (hq / hkv);
      std::vector<double> scores;
      std::vector<int64_t> visible;
      for (int64_t s = 0; s < s_size; ++s) {
        if (p.causal && (s > t || (p.window > 0 && s <= t - p.window))) continue;
        double dot = 0;
        for (int64_t i = 0; i < d; ++i)
          dot += q[static_cast<size_t>((t * hq + h) * d + i)] *
                 k[static_cast<size_t>((s * hkv + kh) * d + i)];
        double x = p.scale * dot;
        if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
        scores.push_back(x);
        visible.push_back(s);
      }
      double m = -INFINITY, sum = 0;
      for (double x : scores) m = std::max(m, x);
      for (double x : scores) sum += std::exp(x - m);
      for (int64_t j = 0; j < dv; ++j) {
        double acc = 0;
        for (size_t i = 0; i < visible.size(); ++i)
          acc += std::exp(scores[i] - m) / sum *
                 v[static_cast<size_t>((visible[i] * hkv + kh) * dv + j)];
        out.push_back(acc);
      }
    }
  return out;
}

}  // namespace

TEST_CASE("ops: attention rules, causal and not, GQA, window, softcap") {
  check_rules_and_reads(attention_case("causal GQA 4/2", 7, 7, 4, 2, {.scale = 0.5}));
  check_rules_and_reads(attention_case("causal window 3", 7, 7, 4, 2, {.scale = 0.5, .window = 3}));
  check_rules_and_reads(
      attention_case("causal softcap", 7, 7, 2, 2, {.scale = 1.0, .softcap = 1.5}));
  check_rules_and_reads(
      attention_case("causal window 1 MQA", 7, 7, 4, 1, {.scale = 0.7, .window = 1}));
  check_rules_and_reads(
      attention_case("non-causal T=S=7", 7, 7, 4, 2, {.scale = 0.5, .causal = false}));
  check_rules_and_reads(
      attention_case("non-causal T=3 S=7", 3, 7, 2, 1, {.scale = 0.5, .causal = false}));
  check_rules_and_reads(
      OpCase{"causal rank 3 f16 Dv != D", [](Graph& g) {
               Tensor q = g.input("q", {6, 2, 4}, DType::F16);
               Tensor k = g.input("k", {6, 2, 4}, DType::F16);
               return attention(q, k, g.input("v", {6, 2, 3}, DType::F16), {.scale = 0.5});
             }});
}

TEST_CASE("ops: attention forward rule makes the KV cache emerge") {
  Graph g;
  Tensor q = g.input("q", {8, 4, 3}, DType::F32);
  Tensor k = g.input("k", {8, 2, 3}, DType::F32);
  Tensor v = g.input("v", {8, 2, 5}, DType::F32);
  Tensor y = attention(q, k, v, {.scale = 0.5});
  // A new key row 5 dirties exactly the query rows that see it.
  CHECK(forward_of(y, 1, Box{{5, 6}, {0, 2}, {0, 3}}) == Region(Box{{5, 8}, {0, 4}, {0, 5}}));
  CHECK(forward_of(y, 1, Box{{5, 6}, {1, 2}, {1, 2}}) == Region(Box{{5, 8}, {2, 4}, {0, 5}}));
  CHECK(forward_of(y, 2, Box{{5, 6}, {0, 1}, {2, 3}}) == Region(Box{{5, 8}, {0, 2}, {2, 3}}));
  CHECK(forward_of(y, 0, Box{{5, 6}, {3, 4}, {0, 1}}) == Region(Box{{5, 6}, {3, 4}, {0, 5}}));
  Tensor windowed = attention(q, k, v, {.scale = 0.5, .window = 2});
  CHECK(forward_of(windowed, 1, Box{{2, 4}, {0, 2}, {0, 3}}) ==
        Region(Box{{2, 5}, {0, 4}, {0, 5}}));
  Tensor full = attention(q, k, v, {.scale = 0.5, .causal = false});
  CHECK(forward_of(full, 1, Box{{5, 6}, {0, 1}, {0, 3}}) == Region(Box{{0, 8}, {0, 2}, {0, 5}}));
  // Query row 6 reads keys [0, 7), or [5, 7) with a window of 2.
  std::vector<Box> need = needed_of(y, Box{{6, 7}, {1, 3}, {2, 4}});
  CHECK(need[0] == Box{{6, 7}, {1, 3}, {0, 3}});
  CHECK(need[1] == Box{{0, 7}, {0, 2}, {0, 3}});
  CHECK(need[2] == Box{{0, 7}, {0, 2}, {2, 4}});
  CHECK(needed_of(windowed, Box{{6, 7}, {0, 1}, {0, 5}})[1] == Box{{5, 7}, {0, 1}, {0, 3}});

  // Exact, not only sound: changing key row 5 changes every query row >= 5 and no other.
  std::vector<double> qv = random_values(96, 1), kv = random_values(48, 2),
                      vv = random_values(80, 3);
  std::vector<double> before = evaluate(g, y, {qv, kv, vv});
  for (size_t i = 5 * 6; i < 6 * 6; ++i) kv[i] += 0.75;
  std::vector<double> after = evaluate(g, y, {qv, kv, vv});
  for (int64_t t = 0; t < 8; ++t) {
    bool changed = false;
    for (size_t i = static_cast<size_t>(t * 20); i < static_cast<size_t>((t + 1) * 20); ++i)
      changed = changed || before[i] != after[i];
    CAPTURE(t);
    CHECK(changed == (t >= 5));
  }
}

TEST_CASE("ops: attention decode step computes one row through a session") {
  Graph g;
  Tensor q = g.input("q", {8, 4, 3}, DType::F32);
  Tensor k = g.input("k", {8, 2, 3}, DType::F32);
  Tensor y = attention(q, k, g.input("v", {8, 2, 5}, DType::F32), {.scale = 0.5});
  g.output("y", y);
  auto to_float = [](const std::vector<double>& v) {
    return std::vector<float>(v.begin(), v.end());
  };
  std::vector<double> qv = random_values(96, 4), kv = random_values(48, 5),
                      vv = random_values(80, 6);
  GraphSession s(g, SessionOptions{.backend = BackendKind::Reference});
  s.write("q", Box{{0, 8}, {0, 4}, {0, 3}}, to_float(qv));
  s.write("k", Box{{0, 8}, {0, 2}, {0, 3}}, to_float(kv));
  s.write("v", Box{{0, 8}, {0, 2}, {0, 5}}, to_float(vv));
  s.read<float>("y", Box{{0, 8}, {0, 4}, {0, 5}});
  CHECK(s.stats().elements_computed == 8 * 4 * 5);
  // "Append" token 7: new q, k and v rows; only output row 7 is recomputed.
  s.write("q", Box{{7, 8}, {0, 4}, {0, 3}}, std::vector<float>(12, 0.25f));
  s.write("k", Box{{7, 8}, {0, 2}, {0, 3}}, std::vector<float>(6, -0.5f));
  s.write("v", Box{{7, 8}, {0, 2}, {0, 5}}, std::vector<float>(10, 1.5f));
  std::vector<float> incremental = s.read<float>("y", Box{{0, 8}, {0, 4}, {0, 5}});
  CHECK(s.stats().elements_computed == 4 * 5);
  // Bitwise identical to a fresh full computation.
  for (size_t i = 7 * 12; i < 8 * 12; ++i) qv[i] = 0.25;
  for (size_t i = 7 * 6; i < 8 * 6; ++i) kv[i] = -0.5;
  for (size_t i = 7 * 10; i < 8 * 10; ++i) vv[i] = 1.5;
  CHECK(to_float(evaluate(g, y, {qv, kv, vv})) == incremental);
}

TEST_CASE("ops: attention matches a naive implementation") {
  const int64_t t = 6, hq = 4, hkv = 2, d = 3, dv = 5;
  Graph g;
  Tensor q = g.input("q", {t, hq, d}, DType::F32);
  Tensor k = g.input("k", {t, hkv, d}, DType::F32);
  Tensor v = g.input("v", {t, hkv, dv}, DType::F32);
  std::vector<double> qv = random_values(t * hq * d, 11), kv = random_values(t * hkv * d, 12),
                      vv = random_values(t * hkv * dv, 13);
  for (AttentionParams p :
       {AttentionParams{.scale = 0.5}, AttentionParams{.scale = 0.5, .window = 2},
        AttentionParams{.scale = 2.0, .softcap = 1.25},
        AttentionParams{.scale = 0.5, .causal = false}}) {
    CAPTURE(p.window);
    CAPTURE(p.softcap);
    CAPTURE(p.causal);
    check_close(evaluate(g, attention(q, k, v, p), {qv, kv, vv}),
                naive_attention(qv, kv, vv, t, t, hq, hkv, d, dv, p));
  }
}

TEST_CASE("ops: attention with a single visible key returns v") {
  // Non-causal over one key, and the first causal row: the softmax weight is exactly 1.
  Graph g;
  Tensor q1 = g.input("q1", {1, 4, 3}, DType::F32);
  Tensor k1 = g.input("k1", {1, 2, 3}, DType::F32);
  Tensor one =
      attention(q1, k1, g.input("v1", {1, 2, 4}, DType::F32), {.scale = 0.5, .causal = false});
  std::vector<double> v = random_values(8, 21);
  std::vector<double> want;  // q head h reads kv head h / 2
  for (int h = 0; h < 4; ++h)
    for (int j = 0; j < 4; ++j) want.push_back(v[static_cast<size_t>((h / 2) * 4 + j)]);
  CHECK(evaluate(g, one, {random_values(12, 22), random_values(6, 23), v}) == want);

  Graph g2;
  Tensor q5 = g2.input("q", {5, 2, 3}, DType::F32);
  Tensor k5 = g2.input("k", {5, 2, 3}, DType::F32);
  Tensor y = attention(q5, k5, g2.input("v", {5, 2, 4}, DType::F32), {.scale = 0.5});
  std::vector<double> vv = random_values(40, 24);
  std::vector<double> out = evaluate(g2, y, {random_values(30, 25), random_values(30, 26), vv});
  CHECK(std::vector<double>(out.begin(), out.begin() + 8) ==
        std::vector<double>(vv.begin(), vv.begin() + 8));
}

TEST_CASE("ops: attention validation errors") {
  Graph g;
  Tensor q = g.input("q", {2, 6, 4, 3}, DType::F32);
  Tensor k = g.input("k", {2, 6, 2, 3}, DType::F32);
  Tensor v = g.input("v", {2, 6, 2, 5}, DType::F32);
  const AttentionParams p{.scale = 0.5};
  auto f32 = [&](const char* name, const Shape& shape) { return g.input(name, shape, DType::F32); };
  CHECK_THROWS_WITH_AS(attention(f32("q2", {6, 3}), f32("k2", {6, 3}), f32("v2", {6, 3}), p),
                       doctest::Contains("[attention] q must be [..., T, Hq, D]"), Error);
  CHECK_THROWS_WITH_AS(attention(q, f32("k3", {6, 2, 3}), v, p),
                       doctest::Contains("[attention] q, k, v must have the same rank"), Error);
  CHECK_THROWS_WITH_AS(attention(q, f32("kb", {3, 6, 2, 3}), f32("vb", {3, 6, 2, 5}), p),
                       doctest::Contains("[attention] leading dims differ"), Error);
  CHECK_THROWS_WITH_AS(attention(q, k, f32("vs", {2, 5, 2, 5}), p),
                       doctest::Contains("must have the same rows and heads"), Error);
  CHECK_THROWS_WITH_AS(attention(q, k, f32("vh", {2, 6, 1, 5}), p),
                       doctest::Contains("must have the same rows and heads"), Error);
  CHECK_THROWS_WITH_AS(attention(q, f32("kd", {2, 6, 2, 4}), v, p),
                       doctest::Contains("[attention] head dim D differs"), Error);
  CHECK_THROWS_WITH_AS(attention(q, f32("k3h", {2, 6, 3, 3}), f32("v3h", {2, 6, 3, 5}), p),
                       doctest::Contains("[attention] query heads 4 not a multiple of kv heads 3"),
                       Error);
  Tensor k7 = f32("k7", {2, 7, 2, 3}), v7 = f32("v7", {2, 7, 2, 5});
  CHECK_THROWS_WITH_AS(attention(q, k7, v7, p),
                       doctest::Contains("[attention] causal attention requires T == S"), Error);
  CHECK_NOTHROW(attention(q, k7, v7, {.scale = 0.5, .causal = false}));
  CHECK_THROWS_WITH_AS(attention(q, k, v, {.scale = 0.5, .window = -1}),
                       doctest::Contains("[attention] window must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(attention(q, k7, v7, {.scale = 0.5, .causal = false, .window = 2}),
                       doctest::Contains("[attention] window requires causal attention"), Error);
  CHECK_THROWS_WITH_AS(attention(q, k, g.input("vh16", {2, 6, 2, 5}, DType::F16), p),
                       doctest::Contains("[attention] dtype mismatch"), Error);
  CHECK_THROWS_WITH_AS(
      attention(g.input("qi", {2, 6, 4, 3}, DType::I32), g.input("ki", {2, 6, 2, 3}, DType::I32),
                g.input("vi", {2, 6, 2, 5}, DType::I32), p),
      doctest::Contains("[attention] q must be float"), Error);
  CHECK_THROWS_WITH_AS(attention(q, k, v, {.scale = 0.5, .softcap = -1}),
                       doctest::Contains("[attention] softcap must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(attention(q, k, v, {.scale = NAN}),
                       doctest::Contains("[attention] scale must be finite"), Error);
  CHECK_THROWS_WITH_AS(attention(q, f32("k0", {2, 0, 2, 3}), f32("v0", {2, 0, 2, 5}),
                                 {.scale = 0.5, .causal = false}),
                       doctest::Contains("[attention] no keys to attend to"), Error);
  Tensor in[] = {q, k, v};
  CHECK_THROWS_WITH_AS(g.add_node(in, AttentionAttrs{.window = -1}),
                       doctest::Contains("[attention] window must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(OpKind::Attention, in, MatmulAttrs{}),
                       doctest::Contains("[attention] given the attributes of matmul"), Error);
}
