// Bounding the box count (shrink_to: a subset, cap: a superset) and the region operations on
// regions of many boxes (where queries skip boxes by the first dimension), against the bitmap
// model of tests/regions/bitmap_model.h. Random cases use fixed seeds and print them on failure.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "regions/box.h"
#include "regions/region.h"
#include "tests/regions/bitmap_model.h"

using namespace tessera;
using namespace tessera::region_model;

namespace {

// A box of extent 1 to 3 per dimension (clipped to the universe): many of them make a
// fragmented region, as scattered reads do.
Box small_box(Rng& rng, const Space& space) {
  Box b = Box::of_rank(space.rank);
  for (int d = 0; d < space.rank; ++d) {
    const int64_t begin = rng.uniform(0, space.extent - 1);
    b[d] = Interval(begin, std::min(space.extent, begin + rng.uniform(1, 3)));
  }
  return b;
}

// Adds (mostly) and removes `count` boxes, small ones or (rarely) random ones.
Region many_box_region(Rng& rng, const Space& space, int64_t count, Bits* model) {
  Region r(space.rank);
  *model = Bits(space.cells(), 0);
  for (int64_t k = 0; k < count; ++k) {
    const Box b = rng.chance(0.9) ? small_box(rng, space) : random_box(rng, space);
    if (rng.chance(0.8)) {
      r.add(b);
      *model = bits_or(*model, bits_of(space, b));
    } else {
      r.remove(b);
      *model = bits_minus(*model, bits_of(space, b));
    }
  }
  return r;
}

Space many_box_space(Rng& rng) {
  Space s;
  s.rank = static_cast<int>(rng.uniform(1, 3));
  s.extent = s.rank == 1   ? rng.uniform(20, 200)
             : s.rank == 2 ? rng.uniform(8, 32)
                           : rng.uniform(5, 12);
  return s;
}

// Sum of the `budget` largest box volumes.
int64_t largest_volumes(const Region& region, int budget) {
  std::vector<int64_t> volumes;
  for (const Box& b : region.boxes()) volumes.push_back(b.volume());
  std::sort(volumes.begin(), volumes.end(), std::greater<>());
  int64_t sum = 0;
  for (size_t i = 0; i < volumes.size() && static_cast<int>(i) < budget; ++i) sum += volumes[i];
  return sum;
}

// shrink_to and cap of `a` to `budget`, each checked against the model.
void check_bounds(const Space& space, const Region& a, const Bits& model_a, int budget) {
  CAPTURE(budget);
  Region shrunk = a;
  shrunk.shrink_to(budget);
  const Bits model_shrunk = bits_of(space, shrunk);
  require_canonical(space, shrunk, model_shrunk);
  REQUIRE(bits_subset(model_shrunk, model_a));
  REQUIRE(static_cast<int>(shrunk.boxes().size()) <= budget);
  if (static_cast<int>(a.boxes().size()) <= budget) REQUIRE(shrunk.boxes() == a.boxes());
  // Coalescing loses nothing and keeping the largest boxes keeps at least the largest ones.
  REQUIRE(shrunk.volume() >= largest_volumes(a, budget));
  Box hull;
  if (budget >= 1 && bits_bounding_box(space, model_a, &hull) &&
      hull.volume() == popcount(model_a)) {
    REQUIRE(shrunk.boxes().size() == 1);  // a region filling its bounding box becomes that box
    REQUIRE(shrunk.boxes()[0] == hull);
  }

  Region capped = a;
  capped.cap(budget);
  REQUIRE(capped.contains(a));  // the opposite bound: a superset
  REQUIRE(bits_subset(model_a, bits_of(space, capped)));
  REQUIRE(static_cast<int>(capped.boxes().size()) <= std::max(budget, 1));
}

}  // namespace

TEST_CASE("regions: shrink_to is a subset within the budget, cap a superset") {
  int shrunk_cases = 0;
  for (int c = 0; c < 1500; ++c) {
    const uint64_t seed = 0x5A121u + static_cast<uint64_t>(c);
    CAPTURE(seed);
    Rng rng(seed);
    Bits model;
    Space space;
    Region a;
    if (rng.chance(0.5)) {
      space = random_space(rng);
      a = random_region(rng, space, &model);
    } else {
      space = many_box_space(rng);
      a = many_box_region(rng, space, rng.uniform(1, 80), &model);
    }
    INFO("extent ", space.extent, ", a = ", a.to_string());
    const int boxes = static_cast<int>(a.boxes().size());
    const int budget = static_cast<int>(rng.uniform(0, boxes + 1));
    shrunk_cases += budget < boxes;
    check_bounds(space, a, model, budget);
  }
  CHECK(shrunk_cases > 500);
}

TEST_CASE("regions: operations on many-box regions match the bitmap model") {
  int large = 0;
  for (int c = 0; c < 300; ++c) {
    const uint64_t seed = 0x3A7E5u + static_cast<uint64_t>(c);
    CAPTURE(seed);
    Rng rng(seed);
    const Space space = many_box_space(rng);
    Bits model_a, model_b;
    const Region a = many_box_region(rng, space, rng.uniform(20, 120), &model_a);
    // b is sometimes as fragmented as a, sometimes one or two boxes (the asymmetric paths).
    const Region b = many_box_region(
        rng, space, rng.chance(0.5) ? rng.uniform(20, 120) : rng.uniform(1, 2), &model_b);
    const Box x = rng.chance(0.5) ? small_box(rng, space) : random_box(rng, space);
    const Bits model_x = bits_of(space, x);
    INFO("extent ", space.extent, "\n  a = ", a.to_string(), "\n  b = ", b.to_string(),
         "\n  x = ", x.to_string());
    large += a.boxes().size() >= 16;

    REQUIRE(a.contains(x) == bits_subset(model_x, model_a));
    REQUIRE(a.contains(b) == bits_subset(model_b, model_a));
    REQUIRE(b.contains(a) == bits_subset(model_a, model_b));
    REQUIRE(a.intersects(x) == bits_meet(model_a, model_x));
    for (const Box& box : b.boxes())
      REQUIRE(a.contains(box) == bits_subset(bits_of(space, box), model_a));
    require_canonical(space, a.unite(b), bits_or(model_a, model_b));
    require_canonical(space, b.unite(a), bits_or(model_a, model_b));
    require_canonical(space, a.unite(x), bits_or(model_a, model_x));
    require_canonical(space, a.intersect(b), bits_and(model_a, model_b));
    require_canonical(space, b.intersect(a), bits_and(model_a, model_b));
    require_canonical(space, a.intersect(x), bits_and(model_a, model_x));
    require_canonical(space, a.subtract(b), bits_minus(model_a, model_b));
    require_canonical(space, b.subtract(a), bits_minus(model_b, model_a));
    require_canonical(space, a.subtract(x), bits_minus(model_a, model_x));
    require_canonical(space, Region(x).subtract(a), bits_minus(model_x, model_a));
    REQUIRE((a == b) == (model_a == model_b));
    REQUIRE(a == rebuilt_reversed(a));
    check_bounds(space, a, model_a, static_cast<int>(rng.uniform(0, 70)));
  }
  CHECK(large > 100);
}

TEST_CASE("regions: shrink_to coalesces before dropping anything") {
  // A pinwheel: five canonical boxes that tile [0,3)x[0,3); one box holds it all.
  Region pinwheel(2);
  pinwheel.add(Box{{0, 1}, {0, 2}});
  pinwheel.add(Box{{0, 2}, {2, 3}});
  pinwheel.add(Box{{2, 3}, {1, 3}});
  pinwheel.add(Box{{1, 3}, {0, 1}});
  pinwheel.add(Box{{1, 2}, {1, 2}});
  REQUIRE(pinwheel.boxes().size() == 5);
  Region r = pinwheel;
  r.shrink_to(1);
  REQUIRE(r.boxes().size() == 1);
  CHECK(r.boxes()[0] == Box{{0, 3}, {0, 3}});
  // The same pinwheel next to a far box: the neighbour hulls find it without losing elements.
  Region two = pinwheel;
  two.add(Box{{10, 12}, {10, 12}});
  REQUIRE(two.boxes().size() == 6);
  Region kept = two;
  kept.shrink_to(4);
  CHECK(kept == two);
  CHECK(kept.boxes().size() <= 4);
}

TEST_CASE("regions: shrink_to keeps the largest boxes") {
  Region r(2);
  r.add(Box{{0, 10}, {0, 10}});                                                  // 100
  r.add(Box{{20, 22}, {0, 3}});                                                  // 6
  for (int64_t i = 0; i < 8; ++i) r.add(Box{{30 + 2 * i, 31 + 2 * i}, {0, 1}});  // isolated cells
  r.add(Box{{50, 54}, {0, 1}});                                                  // 4
  REQUIRE(r.boxes().size() == 11);
  Region top = r;
  top.shrink_to(3);
  REQUIRE(top.boxes().size() == 3);
  CHECK(top.boxes()[0] == Box{{0, 10}, {0, 10}});
  CHECK(top.boxes()[1] == Box{{20, 22}, {0, 3}});
  CHECK(top.boxes()[2] == Box{{50, 54}, {0, 1}});
  // Ties go to the earlier boxes; the order of what is kept is unchanged.
  Region cells = r;
  cells.shrink_to(5);
  REQUIRE(cells.boxes().size() == 5);
  CHECK(cells.boxes()[2] == Box{{30, 31}, {0, 1}});
  CHECK(cells.boxes()[3] == Box{{32, 33}, {0, 1}});
  CHECK(std::is_sorted(cells.boxes().begin(), cells.boxes().end()));
  // A budget of zero forgets everything; within budget nothing changes.
  Region none = r;
  none.shrink_to(0);
  CHECK(none.empty());
  CHECK(none.rank() == 2);
  Region same = r;
  same.shrink_to(11);
  CHECK(same.boxes() == r.boxes());
  // A checkerboard of 2048 cells (nothing to coalesce) keeps its first 64 cells.
  Region board(2);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = i % 2; j < 64; j += 2) board.add(Box{{i, i + 1}, {j, j + 1}});
  Region board_kept = board;
  board_kept.shrink_to(64);
  REQUIRE(board_kept.boxes().size() == 64);
  CHECK(std::equal(board_kept.boxes().begin(), board_kept.boxes().end(), board.boxes().begin()));
  Region scalar(Box{});
  scalar.shrink_to(1);
  CHECK(scalar.volume() == 1);
  scalar.shrink_to(0);
  CHECK(scalar.empty());
}

TEST_CASE("regions: a valid region shrunk after every add stays bounded and exact-or-less") {
  // The session's use: scattered reads make single cells valid, writes invalidate rows.
  constexpr int kBudget = 16;
  const Space space{2, 24};
  Rng rng(0xCE115u);
  Region valid(2), exact(2);
  for (int step = 0; step < 2000; ++step) {
    CAPTURE(step);
    if (step % 7 == 6) {
      const int64_t row = rng.uniform(0, space.extent - 1);
      const Box dirty{{row, row + 1}, {0, space.extent}};
      valid.remove(dirty);
      exact.remove(dirty);
    } else {
      const Box cell = small_box(rng, space);
      valid.add(cell);
      exact.add(cell);
      valid.shrink_to(kBudget);
      REQUIRE(static_cast<int>(valid.boxes().size()) <= kBudget);
    }
    REQUIRE(exact.contains(valid));
  }
  CHECK(exact.boxes().size() > 2 * kBudget);  // the unbounded region did grow
}
