#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <numeric>
#include <random>

#include "engine/session.h"
#include "tests/support/op_harness.h"

using namespace tessera;
using tessera::testing::check_rules;
using tessera::testing::OpCase;
using tessera::testing::ValueRange;

namespace {

using Values = std::vector<double>;

Values iota(int64_t n, double start = 0) {
  Values v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Evaluates the graph of `out` with the reference kernels; `in_values` lists the row-major
// values of each graph input in declaration order.
Values evaluate(const Graph& g, Tensor out, const std::vector<Values>& in_values) {
  std::vector<testing::Buffer> inputs;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    inputs.push_back(testing::make_buffer(n));
    TensorView v = dense_view(inputs.back().data(), n.dtype, Box::full(n.shape));
    size_t k = 0;
    ref::for_each_index(Box::full(n.shape),
                        [&](const int64_t* idx) { ref::store(v, idx, in_values[i][k++]); });
  }
  std::vector<testing::Buffer> values = testing::evaluate_full(g, inputs);
  const Node& n = out.node();
  TensorView v =
      dense_view(values[static_cast<size_t>(out.id)].data(), n.dtype, Box::full(n.shape));
  Values result;
  ref::for_each_index(Box::full(n.shape),
                      [&](const int64_t* idx) { result.push_back(ref::load(v, idx)); });
  return result;
}

Region forward_of(Tensor t, int input, const Box& dirty) {
  const Node& n = t.node();
  Region r(n.rank());
  op_def(n.kind).forward(*t.graph, n, input, dirty, r);
  return r;
}

std::vector<Box> needed_of(Tensor t, const Box& out) {
  const Node& n = t.node();
  std::vector<Box> boxes(n.inputs.size(), Box::of_rank(0));
  op_def(n.kind).needed(*t.graph, n, out, boxes);
  return boxes;
}

OpCase reshape_case(Shape from, Shape to, DType dtype = DType::F32) {
  return OpCase{"reshape " + shape_string(from) + " -> " + shape_string(to),
                [=](Graph& g) { return reshape(g.input("x", from, dtype), to); }};
}

}  // namespace

TEST_CASE("ops: reshape rules split and merge dims") {
  uint64_t seed = 1;
  for (const OpCase& c : {
           reshape_case({6, 12}, {6, 3, 4}),
           reshape_case({6, 3, 4}, {6, 12}),
           reshape_case({4, 6}, {6, 4}),
           reshape_case({2, 3, 4}, {24}),
           reshape_case({24}, {2, 3, 4}),
           reshape_case({2, 3, 4}, {4, 3, 2}),
           reshape_case({5, 1, 6}, {5, 6}),
           reshape_case({5, 6}, {1, 5, 6, 1}),
           reshape_case({3, 4, 5}, {3, -1}),
           reshape_case({2, 6, 5}, {4, 3, 5}),
           reshape_case({2, 3, 4, 5}, {6, 20}),
           reshape_case({7, 5}, {35}),
           reshape_case({1}, {}),
           reshape_case({}, {1, 1}),
           reshape_case({3, 10}, {5, 6}, DType::I64),
           reshape_case({3, 10}, {5, 2, 3}, DType::Bool),
           reshape_case({4, 9}, {6, 6}, DType::F16),
           reshape_case({4, 9}, {2, 18}, DType::BF16),
       })
    check_rules(c, seed++);
}

TEST_CASE("ops: reshape maps a box whole in every merged or split group to exactly its elements") {
  // Dims that map one to one keep any interval; a group of dims merged or split must be whole.
  // Each such box maps to one box holding exactly the same elements (by linear index), both ways.
  struct Pair {
    Shape from, to;
  };
  std::mt19937_64 rng(7);
  for (const Pair& p : {Pair{{6, 12}, {6, 3, 4}}, Pair{{6, 3, 4}, {6, 12}}, Pair{{2, 5, 6}, {2, 5, 2, 3}},
                        Pair{{5, 1, 6}, {5, 6}}, Pair{{5, 6}, {1, 5, 6, 1}}, Pair{{4, 2, 3, 7}, {4, 6, 7}}}) {
    Graph g;
    Tensor y = reshape(g.input("x", p.from, DType::F32), p.to);
    CAPTURE(shape_string(p.from));
    CAPTURE(shape_string(p.to));
    for (int trial = 0; trial < 20; ++trial) {
      // A random box of `from`: an interval on dims of equal extent at the same position from
      // the left that the groups keep one to one, whole elsewhere.
      Box box = Box::full(p.from);
      for (int d = 0; d < static_cast<int>(p.from.size()); ++d) {
        const bool one_to_one = d < static_cast<int>(p.to.size()) && p.from[static_cast<size_t>(d)] == p.to[static_cast<size_t>(d)] &&
                                std::accumulate(p.from.begin(), p.from.begin() + d, int64_t{1}, std::multiplies<>()) ==
                                    std::accumulate(p.to.begin(), p.to.begin() + d, int64_t{1}, std::multiplies<>());
        if (!one_to_one || p.from[static_cast<size_t>(d)] < 2) continue;
        const int64_t n = p.from[static_cast<size_t>(d)];
        const int64_t a = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
        const int64_t b = a + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - a));
        box[d] = Interval(a, b);
      }
      CAPTURE(box.to_string());
      const Region fwd = forward_of(y, 0, box);
      REQUIRE(fwd.boxes().size() == 1);
      const Box mapped = fwd.boxes()[0];
      CHECK(mapped.volume() == box.volume());
      // Every element of the box lands in the mapped box.
      ref::for_each_index(box, [&](const int64_t* index) {
        int64_t linear = 0;
        for (size_t d = 0; d < p.from.size(); ++d) linear = linear * p.from[d] + index[d];
        int64_t to_index[kMaxRank];
        for (int d = static_cast<int>(p.to.size()) - 1; d >= 0; --d) {
          to_index[d] = linear % p.to[static_cast<size_t>(d)];
          linear /= p.to[static_cast<size_t>(d)];
        }
        CHECK(mapped.contains_point(to_index));
      });
      CHECK(needed_of(y, mapped)[0] == box);
    }
  }
}

TEST_CASE("ops: reshape of a row maps to exactly one box") {
  Graph g;
  Tensor x = g.input("x", {6, 12}, DType::F32);
  Tensor y = reshape(x, {6, 3, 4});
  CHECK(y.shape() == Shape{6, 3, 4});
  for (int64_t r = 0; r < 6; ++r) {
    Region fwd = forward_of(y, 0, Box{{r, r + 1}, {0, 12}});
    REQUIRE(fwd.boxes().size() == 1);
    CHECK(fwd.boxes()[0] == Box{{r, r + 1}, {0, 3}, {0, 4}});
  }
  Region rows = forward_of(y, 0, Box{{1, 4}, {0, 12}});
  REQUIRE(rows.boxes().size() == 1);
  CHECK(rows.boxes()[0] == Box{{1, 4}, {0, 3}, {0, 4}});
  // One head of one row: [T, H*D] columns [4, 8) are head 1.
  Region head = forward_of(y, 0, Box{{2, 3}, {4, 8}});
  REQUIRE(head.boxes().size() == 1);
  CHECK(head.boxes()[0] == Box{{2, 3}, {1, 2}, {0, 4}});
  CHECK(needed_of(y, Box{{2, 3}, {1, 2}, {0, 4}})[0] == Box{{2, 3}, {4, 8}});
  CHECK(needed_of(y, Box{{0, 6}, {0, 3}, {0, 4}})[0] == Box{{0, 6}, {0, 12}});

  // And back: [T, H, D] -> [T, H*D].
  Tensor z = reshape(y, {6, 12});
  Region back = forward_of(z, 0, Box{{2, 3}, {1, 2}, {0, 4}});
  REQUIRE(back.boxes().size() == 1);
  CHECK(back.boxes()[0] == Box{{2, 3}, {4, 8}});
  CHECK(needed_of(z, Box{{3, 4}, {0, 12}})[0] == Box{{3, 4}, {0, 3}, {0, 4}});

  // Batch dims stay exact however many there are (not counted as runs).
  Tensor b = g.input("b", {128, 4, 12}, DType::F32);
  Tensor heads = reshape(b, {128, 4, 3, 4});
  Region batch = forward_of(heads, 0, Box{{0, 128}, {2, 3}, {0, 12}});
  REQUIRE(batch.boxes().size() == 1);
  CHECK(batch.boxes()[0] == Box{{0, 128}, {2, 3}, {0, 3}, {0, 4}});
}

TEST_CASE("ops: reshape of fragmented boxes is exact or a sound superset") {
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  Tensor flat = reshape(x, {24});
  // A column is 4 runs of one element: exactly 4 elements.
  Region column = forward_of(flat, 0, Box{{0, 4}, {1, 2}});
  CHECK(column.volume() == 4);
  CHECK(column.boxes().size() == 4);
  for (int64_t r = 0; r < 4; ++r) CHECK(column.contains(Box{{6 * r + 1, 6 * r + 2}}));
  Region block = forward_of(flat, 0, Box{{1, 3}, {2, 5}});
  CHECK(block == Region(Box{{8, 11}}).unite(Box{{14, 17}}));
  CHECK(block.volume() == 6);
  // needed is one box: the hull of the rows the linear range [5, 14) touches.
  CHECK(needed_of(flat, Box{{5, 14}})[0] == Box{{0, 3}, {0, 6}});
  CHECK(needed_of(flat, Box{{6, 12}})[0] == Box{{1, 2}, {0, 6}});

  // 200 runs exceed the cap: the covering range [first, last + 1) is used instead.
  Tensor tall = g.input("tall", {200, 2}, DType::F32);
  Region wide = forward_of(reshape(tall, {400}), 0, Box{{0, 200}, {0, 1}});
  CHECK(wide == Region(Box{{0, 399}}));

  // 60 runs that straddle output rows make more than 64 pieces: the covering range again.
  Tensor straddle = g.input("straddle", {60, 16}, DType::F32);
  Region covered = forward_of(reshape(straddle, {40, 24}), 0, Box{{0, 60}, {1, 15}});
  CHECK(covered.volume() == 958);  // linear [1, 959)
  CHECK(covered.contains(Box{{0, 1}, {1, 24}}));
  check_rules(reshape_case({60, 16}, {40, 24}), 9, 10);

  // A partial range over three dims splits into head, middle and tail boxes.
  Tensor c = g.input("c", {60}, DType::F32);
  Region pieces = forward_of(reshape(c, {3, 4, 5}), 0, Box{{7, 53}});
  CHECK(pieces.volume() == 46);
  CHECK(pieces.contains(Box{{1, 2}, {0, 4}, {0, 5}}));
  CHECK(!pieces.contains(Box{{0, 1}, {1, 2}, {1, 2}}));
}

TEST_CASE("ops: reshape rules on random shape pairs are sound and exact") {
  std::mt19937_64 rng(7);
  // Random factors (volume <= 64, so no box exceeds the run cap) grouped into two shapes.
  auto random_shape = [&](const std::vector<int64_t>& factors) {
    Shape shape;
    for (int64_t f : factors) {
      if (shape.empty() || rng() % 2 == 0)
        shape.push_back(f);
      else
        shape.back() *= f;
    }
    return shape;
  };
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int64_t> factors;
    int64_t volume = 1;
    while (factors.size() < 6) {
      const int64_t f = 1 + static_cast<int64_t>(rng() % 4);
      if (volume * f > 64) break;
      factors.push_back(f);
      volume *= f;
    }
    const Shape from = random_shape(factors);
    std::shuffle(factors.begin(), factors.end(), rng);
    const Shape to = random_shape(factors);
    CAPTURE(shape_string(from));
    CAPTURE(shape_string(to));
    check_rules(reshape_case(from, to), 1000 + static_cast<uint64_t>(trial), 10);
    Graph g;
    Tensor y = reshape(g.input("x", from, DType::F32), to);
    const Shape from_strides = row_major_strides(from), to_strides = row_major_strides(to);
    for (int k = 0; k < 10; ++k) {
      const Box dirty = testing::random_box(from, rng);
      const Region fwd = forward_of(y, 0, dirty);
      CHECK(fwd.volume() == dirty.volume());  // exact: the mapped elements and nothing else
      // The needed box of the mapped region is the hull of the elements' source coordinates.
      const Box out_box = testing::random_box(to, rng);
      Box hull = Box::of_rank(static_cast<int>(from.size()));
      ref::for_each_index(out_box, [&](const int64_t* i) {
        int64_t linear = 0;
        for (size_t d = 0; d < to.size(); ++d) linear += i[d] * to_strides[d];
        Box point = Box::of_rank(static_cast<int>(from.size()));
        for (size_t d = 0; d < from.size(); ++d)
          point[static_cast<int>(d)] =
              Interval(linear / from_strides[d] % from[d], linear / from_strides[d] % from[d] + 1);
        hull = hull.hull(point);
      });
      if (!out_box.empty()) CHECK(needed_of(y, out_box)[0] == hull);
    }
  }
}

TEST_CASE("ops: permute and transpose rules and kernels") {
  check_rules(OpCase{"permute rank 4", [](Graph& g) {
                       return permute(g.input("x", {2, 3, 4, 5}, DType::F32), {2, 0, 3, 1});
                     }});
  check_rules(OpCase{"permute negative",
                     [](Graph& g) {
                       return permute(g.input("x", {3, 2, 4}, DType::I64), {-1, 0, 1});
                     }},
              2);
  check_rules(OpCase{"transpose",
                     [](Graph& g) {
                       return transpose(g.input("x", {3, 4, 5}, DType::BF16), 0, -1);
                     }},
              3);

  Graph g;
  Tensor x = g.input("x", {2, 3}, DType::F32);
  Tensor t = transpose(x, 0, 1);
  CHECK(t.shape() == Shape{3, 2});
  CHECK(evaluate(g, t, {iota(6)}) == Values{0, 3, 1, 4, 2, 5});
  Tensor p = permute(g.input("y", {2, 3, 4}, DType::F32), {2, 0, 1});
  CHECK(forward_of(p, 0, Box{{1, 2}, {0, 3}, {2, 3}}) == Region(Box{{2, 3}, {1, 2}, {0, 3}}));
  CHECK(needed_of(p, Box{{2, 3}, {1, 2}, {0, 3}})[0] == Box{{1, 2}, {0, 3}, {2, 3}});
}

TEST_CASE("ops: slice with steps rules and kernels") {
  check_rules(OpCase{"slice step 2", [](Graph& g) {
                       return slice(g.input("x", {10, 7}, DType::F32), 0, 1, 9, 2);
                     }});
  check_rules(OpCase{"slice step 3",
                     [](Graph& g) {
                       return slice(g.input("x", {10, 7}, DType::I32), 1, 0, 7, 3);
                     }},
              2);
  check_rules(OpCase{"slice clamped",
                     [](Graph& g) {
                       return slice(g.input("x", {4, 9}, DType::F16), -1, 2, 100);
                     }},
              3);
  check_rules(OpCase{"slice two axes",
                     [](Graph& g) {
                       Tensor x = g.input("x", {11, 8}, DType::F32);
                       Tensor in[] = {x};
                       return g.add_node(in, SliceAttrs{.start = {1, 2}, .stop = {11, 7}, .step = {3, 2}});
                     }},
              4);
  check_rules(OpCase{"slice empty",
                     [](Graph& g) {
                       return slice(g.input("x", {5, 3}, DType::F32), 0, 4, 2);
                     }},
              5);

  Graph g;
  Tensor x = g.input("x", {10}, DType::F32);
  Tensor s = slice(x, 0, 1, 10, 3);  // elements 1, 4, 7
  CHECK(s.shape() == Shape{3});
  CHECK(evaluate(g, s, {iota(10)}) == Values{1, 4, 7});
  CHECK(forward_of(s, 0, Box{{2, 4}}).empty());  // no selected element inside
  CHECK(forward_of(s, 0, Box{{2, 5}}) == Region(Box{{1, 2}}));
  CHECK(forward_of(s, 0, Box{{0, 10}}) == Region(Box{{0, 3}}));
  CHECK(needed_of(s, Box{{1, 3}})[0] == Box{{4, 8}});
  CHECK(slice(x, 0, 6, 2).shape() == Shape{0});
}

TEST_CASE("ops: pad at both ends rules and kernels") {
  check_rules(OpCase{"pad 2d", [](Graph& g) {
                       return pad(g.input("x", {3, 4}, DType::F32), {1, 2}, {2, 0}, 1.5f);
                     }});
  check_rules(OpCase{"pad i32",
                     [](Graph& g) {
                       return pad(g.input("x", {2, 3, 2}, DType::I32), {0, 1, 3}, {1, 1, 0}, -7.f);
                     }},
              2);

  Graph g;
  Tensor x = g.input("x", {3}, DType::F32);
  Tensor p = pad(x, {2}, {1}, 9.f);
  CHECK(evaluate(g, p, {{1, 2, 3}}) == Values{9, 9, 1, 2, 3, 9});
  CHECK(forward_of(p, 0, Box{{1, 2}}) == Region(Box{{3, 4}}));
  CHECK(needed_of(p, Box{{0, 2}})[0].empty());  // only padding: the input is not read
  CHECK(needed_of(p, Box{{5, 6}})[0].empty());
  CHECK(needed_of(p, Box{{1, 4}})[0] == Box{{0, 2}});
  Tensor i = g.input("i", {2}, DType::I64);
  CHECK(evaluate(g, pad(i, {1}, {1}, -3.f), {{1, 2, 3}, {5, 6}}) == Values{-3, 5, 6, -3});
}

TEST_CASE("ops: concat rules and kernels") {
  check_rules(OpCase{"concat 3 on middle axis", [](Graph& g) {
                       Tensor xs[] = {g.input("a", {2, 1, 3}, DType::F32),
                                      g.input("b", {2, 4, 3}, DType::F32),
                                      g.input("c", {2, 2, 3}, DType::F32)};
                       return concat(xs, 1);
                     }});
  check_rules(
      OpCase{"concat last axis",
             [](Graph& g) {
               Tensor xs[] = {g.input("a", {3, 2}, DType::Bool), g.input("b", {3, 5}, DType::Bool)};
               return concat(xs, -1);
             }},
      2);
  check_rules(OpCase{"concat same input twice",
                     [](Graph& g) {
                       Tensor x = g.input("a", {2, 3}, DType::I64);
                       Tensor xs[] = {x, x};
                       return concat(xs, 0);
                     }},
              3);

  Graph g;
  Tensor xs[] = {g.input("a", {2, 1, 3}, DType::F32), g.input("b", {2, 4, 3}, DType::F32),
                 g.input("c", {2, 2, 3}, DType::F32)};
  Tensor c = concat(xs, 1);
  CHECK(c.shape() == Shape{2, 7, 3});
  CHECK(forward_of(c, 2, Box{{0, 2}, {0, 1}, {0, 3}}) == Region(Box{{0, 2}, {5, 6}, {0, 3}}));
  CHECK(forward_of(c, 0, Box{{1, 2}, {0, 1}, {2, 3}}) == Region(Box{{1, 2}, {0, 1}, {2, 3}}));
  std::vector<Box> need = needed_of(c, Box{{0, 1}, {0, 3}, {1, 2}});
  CHECK(need[0] == Box{{0, 1}, {0, 1}, {1, 2}});
  CHECK(need[1] == Box{{0, 1}, {0, 2}, {1, 2}});
  CHECK(need[2].empty());  // not touched: not read

  Graph h;
  Tensor ys[] = {h.input("a", {2, 1}, DType::F32), h.input("b", {2, 2}, DType::F32)};
  CHECK(evaluate(h, concat(ys, 1), {{1, 2}, {10, 11, 12, 13}}) == Values{1, 10, 11, 2, 12, 13});
}

TEST_CASE("ops: split and stack values") {
  Graph g;
  Tensor x = g.input("x", {5, 2}, DType::F32);
  std::vector<Tensor> parts = split(x, 0, {2, 0, 3});
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].shape() == Shape{2, 2});
  CHECK(parts[1].shape() == Shape{0, 2});
  CHECK(parts[2].shape() == Shape{3, 2});
  CHECK(evaluate(g, parts[0], {iota(10)}) == Values{0, 1, 2, 3});
  CHECK(evaluate(g, parts[2], {iota(10)}) == Values{4, 5, 6, 7, 8, 9});
  std::vector<Tensor> cols = split(x, -1, {1, 1});
  CHECK(evaluate(g, cols[1], {iota(10)}) == Values{1, 3, 5, 7, 9});

  Graph h;
  Tensor xs[] = {h.input("a", {2, 2}, DType::I32), h.input("b", {2, 2}, DType::I32),
                 h.input("c", {2, 2}, DType::I32)};
  Tensor s1 = stack(xs, 1);
  CHECK(s1.shape() == Shape{2, 3, 2});
  CHECK(evaluate(h, s1, {{0, 1, 2, 3}, {10, 11, 12, 13}, {20, 21, 22, 23}}) ==
        Values{0, 1, 10, 11, 20, 21, 2, 3, 12, 13, 22, 23});
  Tensor s0 = stack(xs, 0);
  CHECK(s0.shape() == Shape{3, 2, 2});
  CHECK(evaluate(h, s0, {{0, 1, 2, 3}, {10, 11, 12, 13}, {20, 21, 22, 23}}) ==
        Values{0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23});
  CHECK(stack(xs, -1).shape() == Shape{2, 2, 3});
}

TEST_CASE("ops: repeat rules and kernels") {
  check_rules(OpCase{"repeat two axes", [](Graph& g) {
                       return repeat(g.input("x", {3, 4}, DType::F32), {2, 3});
                     }});
  check_rules(OpCase{"repeat rank 3",
                     [](Graph& g) {
                       return repeat(g.input("x", {2, 3, 2}, DType::I32), {1, 2, 3});
                     }},
              2);
  check_rules(OpCase{"repeat size-1 axis",
                     [](Graph& g) {
                       return repeat(g.input("x", {1, 5}, DType::F16), {4, 1});
                     }},
              3);
  check_rules(OpCase{"repeat past the box cap",
                     [](Graph& g) {
                       return repeat(g.input("x", {2, 3}, DType::F32), {20, 10});
                     }},
              4, 10);

  Graph g;
  Tensor x = g.input("x", {3, 4}, DType::F32);
  Tensor r = repeat(x, {2, 3});
  CHECK(r.shape() == Shape{6, 12});
  Region fwd = forward_of(r, 0, Box{{1, 2}, {1, 3}});
  CHECK(fwd.volume() == 12);
  CHECK(fwd.boxes().size() == 6);
  CHECK(fwd.contains(Box{{4, 5}, {9, 11}}));
  CHECK(forward_of(r, 0, Box{{0, 3}, {1, 2}}) ==
        Region(Box{{0, 6}, {1, 2}}).unite(Box{{0, 6}, {5, 6}}).unite(Box{{0, 6}, {9, 10}}));
  CHECK(needed_of(r, Box{{2, 5}, {0, 12}})[0] == Box{{0, 3}, {0, 4}});  // wraps a tile boundary
  CHECK(needed_of(r, Box{{3, 5}, {5, 7}})[0] == Box{{0, 2}, {1, 3}});
  CHECK(needed_of(r, Box{{4, 5}, {7, 9}})[0] == Box{{1, 2}, {0, 4}});
  Graph h;
  Tensor v = h.input("v", {2}, DType::F32);
  CHECK(evaluate(h, repeat(v, {3}), {{1, 2}}) == Values{1, 2, 1, 2, 1, 2});
}

TEST_CASE("ops: flip rules and kernels") {
  check_rules(OpCase{"flip two axes", [](Graph& g) {
                       return flip(g.input("x", {3, 4, 5}, DType::F32), {2, 0});
                     }});
  check_rules(OpCase{"flip last",
                     [](Graph& g) {
                       return flip(g.input("x", {6, 2}, DType::I64), {-1});
                     }},
              2);
  check_rules(OpCase{"flip all of rank 4",
                     [](Graph& g) {
                       return flip(g.input("x", {2, 3, 2, 3}, DType::BF16), {0, 1, 2, 3});
                     }},
              3);
  check_rules(
      OpCase{"flip nothing", [](Graph& g) { return flip(g.input("x", {4}, DType::F32), {}); }}, 4);

  Graph g;
  Tensor x = g.input("x", {2, 3}, DType::F32);
  CHECK(evaluate(g, flip(x, {1}), {iota(6)}) == Values{2, 1, 0, 5, 4, 3});
  CHECK(evaluate(g, flip(x, {0, 1}), {iota(6)}) == Values{5, 4, 3, 2, 1, 0});
  Tensor f = flip(g.input("y", {5}, DType::F32), {0});
  CHECK(forward_of(f, 0, Box{{1, 2}}) == Region(Box{{3, 4}}));
  CHECK(needed_of(f, Box{{0, 2}})[0] == Box{{3, 5}});
}

TEST_CASE("ops: expand rules and kernels") {
  check_rules(OpCase{"expand leading dims", [](Graph& g) {
                       return expand(g.input("x", {3, 1}, DType::F32), {2, 3, 4});
                     }});
  check_rules(OpCase{"expand scalar-like",
                     [](Graph& g) { return expand(g.input("x", {1}, DType::I32), {5}); }},
              2);
  check_rules(OpCase{"expand middle",
                     [](Graph& g) {
                       return expand(g.input("x", {2, 1, 3}, DType::Bool), {4, 2, 5, 3});
                     }},
              3);

  Graph g;
  Tensor x = g.input("x", {3, 1}, DType::F32);
  Tensor e = expand(x, {2, 3, 4});
  CHECK(forward_of(e, 0, Box{{1, 2}, {0, 1}}) == Region(Box{{0, 2}, {1, 2}, {0, 4}}));
  CHECK(needed_of(e, Box{{0, 1}, {1, 3}, {2, 3}})[0] == Box{{1, 3}, {0, 1}});
  CHECK(evaluate(g, expand(x, {3, 2}), {{1, 2, 3}}) == Values{1, 1, 2, 2, 3, 3});
}

TEST_CASE("ops: movement kernels work for every dtype") {
  const DType dtypes[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool};
  uint64_t seed = 100;
  for (DType dt : dtypes) {
    check_rules(OpCase{"reshape",
                       [dt](Graph& g) {
                         return reshape(g.input("x", {4, 6}, dt), {3, 8});
                       }},
                seed++, 8);
    check_rules(OpCase{"permute",
                       [dt](Graph& g) {
                         return permute(g.input("x", {3, 4}, dt), {1, 0});
                       }},
                seed++, 8);
    check_rules(OpCase{"slice",
                       [dt](Graph& g) {
                         return slice(g.input("x", {7, 3}, dt), 0, 1, 7, 2);
                       }},
                seed++, 8);
    check_rules(OpCase{"pad",
                       [dt](Graph& g) {
                         return pad(g.input("x", {3, 3}, dt), {1, 0}, {0, 2}, 1.f);
                       }},
                seed++, 8);
    check_rules(OpCase{"concat",
                       [dt](Graph& g) {
                         Tensor xs[] = {g.input("a", {2, 3}, dt), g.input("b", {1, 3}, dt)};
                         return concat(xs, 0);
                       }},
                seed++, 8);
    check_rules(OpCase{"repeat",
                       [dt](Graph& g) {
                         return repeat(g.input("x", {2, 3}, dt), {2, 2});
                       }},
                seed++, 8);
    check_rules(OpCase{"flip",
                       [dt](Graph& g) {
                         return flip(g.input("x", {3, 4}, dt), {0, 1});
                       }},
                seed++, 8);
    check_rules(OpCase{"expand",
                       [dt](Graph& g) {
                         return expand(g.input("x", {3, 1}, dt), {2, 3, 2});
                       }},
                seed++, 8);
  }
  // Bytes are copied as they are: i64 beyond 2^53 survives (a double round trip would not).
  Graph g;
  Tensor x = g.input("x", {2, 2}, DType::I64);
  Tensor y = flip(reshape(transpose(x, 0, 1), {4}), {0});
  const int64_t big = (int64_t{1} << 60) + 1;
  std::vector<testing::Buffer> inputs{testing::make_buffer(x.node())};
  const int64_t raw[4] = {big, big + 2, big + 4, big + 6};
  std::memcpy(inputs[0].data(), raw, sizeof(raw));
  std::vector<testing::Buffer> values = testing::evaluate_full(g, inputs);
  int64_t got[4];
  std::memcpy(got, values[static_cast<size_t>(y.id)].data(), sizeof(got));
  CHECK(got[0] == big + 6);
  CHECK(got[1] == big + 2);
  CHECK(got[2] == big + 4);
  CHECK(got[3] == big);
}

TEST_CASE("ops: movement validation errors") {
  Graph g;
  Tensor x = g.input("x", {2, 3}, DType::F32);
  Tensor i = g.input("i", {2, 3}, DType::I32);
  Tensor w = g.input("w", {2, 4}, DType::F32);
  Tensor in[] = {x};
  // reshape
  CHECK_THROWS_WITH_AS(reshape(x, {4, 2}), doctest::Contains("[reshape] volume mismatch"), Error);
  CHECK_THROWS_WITH_AS(reshape(x, {-1, -1}), doctest::Contains("[reshape] more than one -1"),
                       Error);
  CHECK_THROWS_WITH_AS(reshape(x, {4, -1}), doctest::Contains("[reshape] cannot infer -1"), Error);
  CHECK_THROWS_WITH_AS(reshape(x, {-2, -3}), doctest::Contains("[reshape] negative"), Error);
  CHECK_THROWS_WITH_AS(reshape(Tensor{}, {1}), doctest::Contains("[reshape] empty tensor"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, ReshapeAttrs{{3, 3}}),
                       doctest::Contains("[reshape] volume mismatch"), Error);
  // permute / transpose
  CHECK_THROWS_WITH_AS(permute(x, {0, 0}), doctest::Contains("[permute] perm repeats axis"), Error);
  CHECK_THROWS_WITH_AS(permute(x, {0}), doctest::Contains("[permute] expects 2"), Error);
  CHECK_THROWS_WITH_AS(permute(x, {0, 2}), doctest::Contains("[permute] axis 2 out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, PermuteAttrs{{0, 5}}),
                       doctest::Contains("[permute] perm entry 5 out of range"), Error);
  CHECK_THROWS_WITH_AS(transpose(x, 0, 2), doctest::Contains("[transpose] axis 2 out of range"),
                       Error);
  // slice
  CHECK_THROWS_WITH_AS(slice(x, 0, 0, 2, 0), doctest::Contains("[slice] step must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(slice(x, 2, 0, 1), doctest::Contains("[slice] axis 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, SliceAttrs{.start = {1, 0}, .stop = {0, 3}, .step = {1, 1}}),
                       doctest::Contains("[slice] axis 0"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, SliceAttrs{.start = {0, 0}, .stop = {2, 4}, .step = {1, 1}}),
                       doctest::Contains("[slice] axis 1"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, SliceAttrs{.start = {0}, .stop = {2}, .step = {1}}),
                       doctest::Contains("[slice] expects 2"), Error);
  // pad
  CHECK_THROWS_WITH_AS(pad(x, {0, -1}, {0, 0}), doctest::Contains("[pad] negative pad"), Error);
  CHECK_THROWS_WITH_AS(pad(x, {0, 1, 2}, {0}), doctest::Contains("[pad] expects 2"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, PadAttrs{.before = {0}, .after = {0, 0}}),
                       doctest::Contains("[pad] expects 2 before amounts"), Error);
  // concat
  Tensor mixed[] = {x, i};
  CHECK_THROWS_WITH_AS(concat(mixed, 0), doctest::Contains("[concat] dtype mismatch"), Error);
  Tensor uneven[] = {x, w};
  CHECK_THROWS_WITH_AS(concat(uneven, 0), doctest::Contains("[concat] shape mismatch"), Error);
  CHECK(concat(uneven, 1).shape() == Shape{2, 7});
  Tensor ranks[] = {x, g.input("r", {2, 3, 1}, DType::F32)};
  CHECK_THROWS_WITH_AS(concat(ranks, 0), doctest::Contains("[concat] shape mismatch"), Error);
  CHECK_THROWS_WITH_AS(concat(uneven, 2), doctest::Contains("[concat] axis 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(concat(std::span<const Tensor>{}, 0),
                       doctest::Contains("[concat] no inputs"), Error);
  std::vector<Tensor> many(65, x);
  CHECK_THROWS_WITH_AS(concat(many, 0), doctest::Contains("[concat] expects 1..64 inputs"), Error);
  // split / stack
  CHECK_THROWS_WITH_AS(split(x, 1, {1, 1}), doctest::Contains("[split] sizes sum to 2"), Error);
  CHECK_THROWS_WITH_AS(split(x, 1, {4, -1}), doctest::Contains("[split] negative size"), Error);
  CHECK_THROWS_WITH_AS(stack(uneven, 0), doctest::Contains("[stack] shape mismatch"), Error);
  CHECK_THROWS_WITH_AS(stack(std::span<const Tensor>{}, 0), doctest::Contains("[stack] no inputs"),
                       Error);
  CHECK_THROWS_WITH_AS(stack(in, 3), doctest::Contains("[stack] axis 3 out of range"), Error);
  // repeat
  CHECK_THROWS_WITH_AS(repeat(x, {1, 0}), doctest::Contains("[repeat] repeats must be >= 1"),
                       Error);
  CHECK_THROWS_WITH_AS(repeat(x, {2}), doctest::Contains("[repeat] expects 2"), Error);
  // flip
  CHECK_THROWS_WITH_AS(flip(x, {2}), doctest::Contains("[flip] axis 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(flip(x, {1, -1}), doctest::Contains("[flip] axis listed twice"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, FlipAttrs{{1, 0}}),
                       doctest::Contains("[flip] axes must be sorted and unique"), Error);
  // expand
  CHECK_THROWS_WITH_AS(expand(x, {2, 4}), doctest::Contains("[expand] cannot expand"), Error);
  CHECK_THROWS_WITH_AS(expand(x, {3}), doctest::Contains("[expand] cannot expand"), Error);
  CHECK_THROWS_WITH_AS(expand(x, {-1, 2, 3}), doctest::Contains("[expand] cannot expand"), Error);
}

TEST_CASE("ops: a movement chain recomputes one row in a session") {
  Graph g;
  Tensor x = g.input("x", {8, 12}, DType::F32);
  Tensor heads = reshape(x, {8, 3, 4});
  Tensor by_head = transpose(heads, 0, 1);                   // [3, 8, 4]
  Tensor flipped = flip(by_head, {1});                       // row t lands on 7 - t
  Tensor padded = pad(flipped, {0, 1, 0}, {0, 0, 0}, -1.f);  // [3, 9, 4]
  Tensor tiled = repeat(x, {2, 1});                          // [16, 12]
  g.output("padded", padded);
  g.output("tiled", tiled);
  GraphSession s(g, SessionOptions{.backend = BackendKind::Reference});
  std::vector<float> v(96);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  s.write<float>("x", Box{{0, 8}, {0, 12}}, v);
  s.read<float>("padded", Box{{0, 3}, {0, 9}, {0, 4}});
  s.read<float>("tiled", Box{{0, 16}, {0, 12}});

  std::vector<float> row(12, 42.f);
  s.write<float>("x", Box{{5, 6}, {0, 12}}, row);
  const std::vector<float> after = s.read<float>("padded", Box{{0, 3}, {0, 9}, {0, 4}});
  for (Tensor t : {heads, by_head, flipped, padded})
    CHECK(s.stats().elements_per_node[static_cast<size_t>(t.id)] == 12);
  const std::vector<float> tiled_after = s.read<float>("tiled", Box{{0, 16}, {0, 12}});
  CHECK(s.stats().elements_per_node[static_cast<size_t>(tiled.id)] == 24);

  std::fill(v.begin() + 60, v.begin() + 72, 42.f);
  const Values in(v.begin(), v.end());
  CHECK(evaluate(g, padded, {in}) == Values(after.begin(), after.end()));
  CHECK(evaluate(g, tiled, {in}) == Values(tiled_after.begin(), tiled_after.end()));
}
