// Box and Region against a brute-force bitmap model (tests/regions/bitmap_model.h), plus
// deterministic cases for coalescing, splitting and the Box basics. Random cases use fixed
// seeds; a failure prints the seed and the operands.
#include "regions/region.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "regions/box.h"
#include "tests/regions/bitmap_model.h"

using namespace tessera;
using namespace tessera::region_model;

TEST_CASE("regions: box operations match the bitmap model") {
  for (int c = 0; c < kRandomCases; ++c) {
    const uint64_t seed = 0xB0C5u + static_cast<uint64_t>(c);
    CAPTURE(seed);
    Rng rng(seed);
    const Space space = random_space(rng);
    const Box a = random_box(rng, space), b = random_box(rng, space);
    INFO("a = ", a.to_string(), ", b = ", b.to_string(), ", extent ", space.extent);
    const Bits bits_a = bits_of(space, a), bits_b = bits_of(space, b);

    REQUIRE(a.rank() == space.rank);
    REQUIRE(a.empty() == (popcount(bits_a) == 0));
    REQUIRE(a.volume() == popcount(bits_a));
    bool inside = true;
    for (int d = 0; d < space.rank; ++d)
      inside = inside && a.begin(d) >= 0 && a.end(d) <= space.extent && a.begin(d) <= a.end(d);
    REQUIRE(a.inside(space.shape()) == inside);

    const Box meet = a.intersect(b);
    REQUIRE(meet.rank() == space.rank);
    REQUIRE(bits_of(space, meet) == bits_and(bits_a, bits_b));
    REQUIRE(meet.volume() == popcount(bits_and(bits_a, bits_b)));
    REQUIRE(a.intersects(b) == bits_meet(bits_a, bits_b));
    REQUIRE(b.intersects(a) == a.intersects(b));
    REQUIRE(a.contains(b) == bits_subset(bits_b, bits_a));
    REQUIRE(b.contains(a) == bits_subset(bits_a, bits_b));

    const Box hull = a.hull(b);
    if (b.empty()) {
      REQUIRE(hull == a);
    } else if (a.empty()) {
      REQUIRE(hull == b);
    } else {
      Box expected;
      REQUIRE(bits_bounding_box(space, bits_or(bits_a, bits_b), &expected));
      REQUIRE(hull == expected);
    }
    REQUIRE(hull.contains(a));
    REQUIRE(hull.contains(b));

    // operator<: a strict weak order consistent with ==.
    REQUIRE(int{a < b} + int{b < a} + int{a == b} == 1);
    REQUIRE_FALSE(a < a);
    REQUIRE(a == a);

    // contains_point on every cell.
    int64_t point_mismatches = 0;
    for_each_point(space, Box::full(space.shape()), [&](const int64_t* i) {
      point_mismatches += a.contains_point(i) != (bits_a[space.linear(i)] == 1);
    });
    REQUIRE(point_mismatches == 0);

    // subtract_box: at most 2 * rank disjoint non-empty pieces whose union is exactly a \ b.
    Region::Boxes pieces;
    subtract_box(a, b, pieces);
    REQUIRE(static_cast<int>(pieces.size()) <= 2 * space.rank);
    Bits covered(space.cells(), 0);
    int64_t covered_twice = 0;
    for (const Box& p : pieces) {
      INFO("piece ", p.to_string());
      REQUIRE_FALSE(p.empty());
      REQUIRE(p.rank() == space.rank);
      REQUIRE(a.contains(p));
      REQUIRE_FALSE(p.intersects(b));
      for_each_point(space, p, [&](const int64_t* i) {
        uint8_t& cell = covered[space.linear(i)];
        covered_twice += cell;
        cell = 1;
      });
    }
    REQUIRE(covered_twice == 0);  // pieces are pairwise disjoint
    REQUIRE(covered == bits_minus(bits_a, bits_b));
  }
}

TEST_CASE("regions: region operations match the bitmap model") {
  int equal_pairs = 0, capped = 0, multi_box = 0;
  for (int c = 0; c < kRandomCases; ++c) {
    const uint64_t seed = 0x5E610Au + static_cast<uint64_t>(c);
    CAPTURE(seed);
    Rng rng(seed);
    const Space space = random_space(rng);
    Bits model_a, model_b;
    const Region a = random_region(rng, space, &model_a);
    const Region b = random_region(rng, space, &model_b);
    const Box x = random_box(rng, space);
    const Bits model_x = bits_of(space, x);
    INFO("extent ", space.extent, "\n  a = ", a.to_string(), "\n  b = ", b.to_string(),
         "\n  x = ", x.to_string());
    multi_box += a.boxes().size() > 1;

    // Queries.
    Box expected_bbox;
    if (bits_bounding_box(space, model_a, &expected_bbox)) {
      REQUIRE(a.bounding_box() == expected_bbox);
    } else {
      REQUIRE(a.bounding_box().rank() == space.rank);
      REQUIRE(a.bounding_box().empty());
    }
    REQUIRE(a.contains(x) == bits_subset(model_x, model_a));
    REQUIRE(a.contains(b) == bits_subset(model_b, model_a));
    REQUIRE(a.contains(a));
    REQUIRE(a.intersects(x) == bits_meet(model_a, model_x));

    // Union.
    require_canonical(space, a.unite(b), bits_or(model_a, model_b));
    require_canonical(space, a.unite(x), bits_or(model_a, model_x));
    {
      Region r = a;
      r.add(b);
      require_canonical(space, r, bits_or(model_a, model_b));
      r.add(b);  // idempotent
      require_canonical(space, r, bits_or(model_a, model_b));
    }

    // Intersection.
    require_canonical(space, a.intersect(b), bits_and(model_a, model_b));
    require_canonical(space, a.intersect(x), bits_and(model_a, model_x));

    // Difference.
    require_canonical(space, a.subtract(b), bits_minus(model_a, model_b));
    require_canonical(space, a.subtract(x), bits_minus(model_a, model_x));
    {
      Region r = a;
      r.remove(b);
      require_canonical(space, r, bits_minus(model_a, model_b));
      r.remove(x);
      require_canonical(space, r, bits_minus(bits_minus(model_a, model_b), model_x));
    }

    // Equality: same element set, however built.
    const bool same = model_a == model_b;
    equal_pairs += same;
    REQUIRE((a == b) == same);
    REQUIRE((b == a) == same);
    REQUIRE(a == rebuilt_reversed(a));
    REQUIRE(a == a.unite(b).subtract(b.subtract(a)));
    REQUIRE(a.unite(b) == b.unite(a));
    REQUIRE(a.intersect(b) == b.intersect(a));
    REQUIRE((a.unite(x) == a) == bits_subset(model_x, model_a));
    REQUIRE(a.subtract(b).unite(a.intersect(b)) == a);

    // cap: unchanged up to max_boxes boxes, otherwise exactly the bounding box.
    const int max_boxes = static_cast<int>(rng.uniform(0, 4));
    Region r = a;
    r.cap(max_boxes);
    if (static_cast<int>(a.boxes().size()) <= max_boxes) {
      REQUIRE(r.boxes() == a.boxes());
    } else {
      ++capped;
      REQUIRE(r.boxes().size() == 1);
      REQUIRE(r.boxes()[0] == a.bounding_box());
      REQUIRE(r.contains(a));
    }
  }
  // The generator must actually exercise the interesting branches.
  CHECK(equal_pairs > 20);
  CHECK(capped > 100);
  CHECK(multi_box > 800);
}

TEST_CASE("regions: appending rows coalesces into one box") {
  // Along the first dimension, incrementally and from scratch for each t.
  Region grown(Box{{0, 1}, {0, 16}});
  for (int64_t t = 1; t <= 100; ++t) {
    CAPTURE(t);
    Region r(Box{{0, t}, {0, 16}});
    r.add(Box{{t, t + 1}, {0, 16}});
    REQUIRE(r.boxes().size() == 1);
    CHECK(r.boxes()[0] == Box{{0, t + 1}, {0, 16}});

    grown.add(Box{{t, t + 1}, {0, 16}});
    REQUIRE(grown.boxes().size() == 1);
    CHECK(grown.boxes()[0] == Box{{0, t + 1}, {0, 16}});
  }
  // Along a middle dimension ([batch, seq, hidden]), and prepending.
  Region seq(Box{{0, 2}, {0, 1}, {0, 8}});
  for (int64_t t = 1; t <= 100; ++t) seq.add(Box{{0, 2}, {t, t + 1}, {0, 8}});
  REQUIRE(seq.boxes().size() == 1);
  CHECK(seq.boxes()[0] == Box{{0, 2}, {0, 101}, {0, 8}});
  Region back(Box{{99, 100}, {0, 4}});
  for (int64_t t = 98; t >= 0; --t) back.add(Box{{t, t + 1}, {0, 4}});
  REQUIRE(back.boxes().size() == 1);
  CHECK(back.boxes()[0] == Box{{0, 100}, {0, 4}});
  // Rows that overlap what is already there.
  Region overlap(Box{{0, 5}, {0, 4}});
  overlap.add(Box{{3, 9}, {0, 4}});
  REQUIRE(overlap.boxes().size() == 1);
  CHECK(overlap.boxes()[0] == Box{{0, 9}, {0, 4}});
}

TEST_CASE("regions: appending 10000 rows stays one box") {
  Region r(2);
  for (int64_t t = 0; t < 10000; ++t) {
    r.add(Box{{t, t + 1}, {0, 64}});
    REQUIRE(r.boxes().size() == 1);
  }
  CHECK(r.boxes()[0] == Box{{0, 10000}, {0, 64}});
  CHECK(r.volume() == 10000 * 64);
  // Writing rows into a fully valid region never fragments it.
  for (int64_t t = 0; t < 10000; t += 7) r.add(Box{{t, t + 1}, {0, 64}});
  CHECK(r.boxes().size() == 1);
}

TEST_CASE("regions: a fragmented checkerboard region stays tractable") {
  // 2048 isolated cells: canonicalizing must not rescan all pairs on every add (that took
  // tens of seconds here); no assertion on time, only on the result.
  constexpr int64_t n = 64;
  Region cells(2);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i % 2; j < n; j += 2) cells.add(Box{{i, i + 1}, {j, j + 1}});
  CHECK(cells.boxes().size() == n * n / 2);
  CHECK(cells.volume() == n * n / 2);
  // The same set carved out of the full box by removing the other colour.
  Region carved(Box{{0, n}, {0, n}});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 1 - i % 2; j < n; j += 2) carved.remove(Box{{i, i + 1}, {j, j + 1}});
  CHECK(carved.boxes().size() == n * n / 2);
  CHECK(carved == cells);
  CHECK(std::is_sorted(cells.boxes().begin(), cells.boxes().end()));
  cells.add(Box{{0, n}, {0, n}});
  REQUIRE(cells.boxes().size() == 1);
  CHECK(cells.boxes()[0] == Box{{0, n}, {0, n}});
}

TEST_CASE("regions: adding the same box twice is idempotent") {
  const Box box{{1, 4}, {2, 6}, {0, 3}};
  Region r(box);
  const Region::Boxes before = r.boxes();
  r.add(box);
  CHECK(r.boxes() == before);
  r.add(Box{{2, 3}, {3, 5}, {1, 2}});  // already covered
  CHECK(r.boxes() == before);
  Region two(Box{{0, 2}, {0, 2}});
  two.add(Box{{5, 7}, {5, 7}});
  const Region::Boxes two_before = two.boxes();
  two.add(Box{{5, 7}, {5, 7}});
  two.add(Box{{0, 2}, {0, 2}});
  CHECK(two.boxes() == two_before);
  CHECK(two.boxes().size() == 2);
}

TEST_CASE("regions: removing a middle row splits into two boxes") {
  Region r(Box{{0, 10}, {0, 4}});
  r.remove(Box{{4, 5}, {0, 4}});
  REQUIRE(r.boxes().size() == 2);
  CHECK(r.boxes()[0] == Box{{0, 4}, {0, 4}});
  CHECK(r.boxes()[1] == Box{{5, 10}, {0, 4}});
  CHECK(r.volume() == 36);
  CHECK(r.to_string() == "{[0:4, 0:4] [5:10, 0:4]}");
  // Putting the row back coalesces again.
  r.add(Box{{4, 5}, {0, 4}});
  REQUIRE(r.boxes().size() == 1);
  CHECK(r.boxes()[0] == Box{{0, 10}, {0, 4}});
  // Removing everything leaves an empty region of the same rank.
  r.remove(Box{{0, 10}, {0, 4}});
  CHECK(r.empty());
  CHECK(r.rank() == 2);
  CHECK(r.volume() == 0);
  CHECK(r.bounding_box().empty());
  CHECK(r.bounding_box().rank() == 2);
}

TEST_CASE("regions: adding a covering box collapses fragments") {
  // A pinwheel: four rectangles around a centre cell tile [0,3)x[0,3), yet no two merge.
  Region r(2);
  r.add(Box{{0, 1}, {0, 2}});
  r.add(Box{{0, 2}, {2, 3}});
  r.add(Box{{2, 3}, {1, 3}});
  r.add(Box{{1, 3}, {0, 1}});
  r.add(Box{{1, 2}, {1, 2}});
  CHECK(r.boxes().size() == 5);
  CHECK(r.volume() == 9);
  CHECK(r == Region(Box{{0, 3}, {0, 3}}));
  r.add(Box{{0, 3}, {0, 3}});
  REQUIRE(r.boxes().size() == 1);
  CHECK(r.boxes()[0] == Box{{0, 3}, {0, 3}});
  // Many dirty cells, then the whole tensor becomes valid: one box.
  Region cells(2);
  for (int64_t i = 0; i < 8; ++i) cells.add(Box{{i, i + 1}, {(i * 3) % 8, (i * 3) % 8 + 1}});
  CHECK(cells.boxes().size() == 8);
  cells.add(Box{{0, 8}, {0, 8}});
  REQUIRE(cells.boxes().size() == 1);
  CHECK(cells.boxes()[0] == Box{{0, 8}, {0, 8}});
}

TEST_CASE("regions: adding or removing a region to itself") {
  // More than 4 boxes, so the storage is on the heap.
  Region r(2);
  for (int64_t i = 0; i < 6; ++i) r.add(Box{{2 * i, 2 * i + 1}, {0, i + 1}});
  REQUIRE(r.boxes().size() == 6);
  const Region copy = r;
  r.add(r);
  CHECK(r == copy);
  CHECK(r.boxes() == copy.boxes());
  r.remove(r);
  CHECK(r.empty());
  CHECK(r.rank() == 2);
  Region small(Box{{0, 2}, {0, 2}});
  small.remove(small);
  CHECK(small.empty());
  // A box argument that aliases one of the region's own boxes.
  Region alias = copy;
  alias.add(alias.boxes()[2]);
  CHECK(alias.boxes() == copy.boxes());
  alias.remove(alias.boxes()[1]);
  CHECK(alias == copy.subtract(copy.boxes()[1]));
  CHECK(alias.volume() == copy.volume() - copy.boxes()[1].volume());
}

TEST_CASE("regions: box basics") {
  const Box scalar{};
  CHECK(scalar.rank() == 0);
  CHECK_FALSE(scalar.empty());
  CHECK(scalar.volume() == 1);
  CHECK(scalar.to_string() == "[]");
  CHECK(scalar.contains(scalar));
  CHECK(scalar.intersects(scalar));
  CHECK(scalar.inside(std::vector<int64_t>{}));

  const Box one{{0, 7}};
  CHECK(one.rank() == 1);
  CHECK(one.extent(0) == 7);
  CHECK(one.volume() == 7);
  CHECK(one.to_string() == "[0:7]");

  const Box two{{6, 7}, {0, 32}};
  CHECK(two.rank() == 2);
  CHECK(two.begin(0) == 6);
  CHECK(two.end(0) == 7);
  CHECK(two.extent(1) == 32);
  CHECK(two.volume() == 32);
  CHECK(two.to_string() == "[6:7, 0:32]");

  CHECK(Interval(5, 3).empty());
  CHECK(Interval(5, 3).size() == 0);
  CHECK(Interval(3, 3).empty());
  CHECK(Box{{5, 3}, {0, 4}}.empty());
  CHECK(Box{{5, 3}, {0, 4}}.volume() == 0);
  CHECK(Box::of_rank(3).rank() == 3);
  CHECK(Box::of_rank(3).empty());
  CHECK(Box::of_rank(3).volume() == 0);

  const std::vector<int64_t> shape{8, 32};
  CHECK(Box::full(shape) == Box{{0, 8}, {0, 32}});
  CHECK(two.inside(shape));
  CHECK(Box{{0, 8}, {0, 32}}.inside(shape));
  CHECK_FALSE(Box{{0, 9}, {0, 32}}.inside(shape));
  CHECK_FALSE(Box{{-1, 2}, {0, 32}}.inside(shape));
  CHECK_FALSE(one.inside(shape));  // wrong rank

  const Box a{{0, 4}, {2, 6}}, b{{2, 8}, {0, 3}};
  CHECK(a.intersect(b) == Box{{2, 4}, {2, 3}});
  CHECK(a.intersects(b));
  CHECK(a.hull(b) == Box{{0, 8}, {0, 6}});
  CHECK_FALSE(a.contains(b));
  CHECK(a.hull(b).contains(a));
  CHECK(a.contains(Box{{1, 3}, {2, 6}}));
  CHECK(a.contains(Box{{9, 9}, {0, 1}}));  // empty boxes are contained everywhere
  CHECK_FALSE(Box{{9, 9}, {0, 1}}.contains(a));
  CHECK_FALSE(a.intersects(Box{{4, 6}, {0, 9}}));  // touching is not intersecting
  CHECK(a.intersect(Box{{4, 6}, {0, 9}}).empty());
  CHECK(a.hull(Box{{9, 9}, {0, 1}}) == a);  // the empty side is ignored
  CHECK(Box{{9, 9}, {0, 1}}.hull(a) == a);
}

TEST_CASE("regions: region basics") {
  const Region scalar(Box{});
  CHECK(scalar.rank() == 0);
  CHECK(scalar.volume() == 1);
  CHECK(scalar.boxes().size() == 1);
  CHECK(scalar.subtract(Box{}).empty());
  CHECK(scalar.unite(Box{}).boxes().size() == 1);

  const Region empty_box(Box{{3, 3}, {0, 4}});
  CHECK(empty_box.empty());
  CHECK(empty_box.rank() == 2);
  CHECK(Region(2) == empty_box);
  CHECK(Region::full(std::vector<int64_t>{4, 5}) == Region(Box{{0, 4}, {0, 5}}));
  CHECK(Region::full(std::vector<int64_t>{4, 5}).volume() == 20);

  // A default region takes the rank of the first box added to it.
  Region r;
  r.add(Box{{0, 2}, {0, 3}, {1, 2}});
  CHECK(r.rank() == 3);
  CHECK(r.volume() == 6);

  CHECK(Region(2).to_string() == "{}");
  CHECK(Region(Box{{0, 2}, {1, 3}}).to_string() == "{[0:2, 1:3]}");
  CHECK(Region(2).contains(Box{{1, 1}, {0, 4}}));
  CHECK_FALSE(Region(2).contains(Box{{0, 1}, {0, 4}}));
  CHECK(Region(Box{{0, 2}, {0, 2}}).contains(Region(2)));
  CHECK_FALSE(Region(2).intersects(Box{{0, 1}, {0, 4}}));
}

TEST_CASE("regions: subtract_box pieces are disjoint and exact") {
  Region::Boxes pieces;
  subtract_box(Box{{0, 10}, {0, 10}}, Box{{3, 5}, {4, 8}}, pieces);
  CHECK(pieces.size() == 4);  // a hole in the middle: one slab per side
  int64_t volume = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    volume += pieces[i].volume();
    CHECK_FALSE(pieces[i].intersects(Box{{3, 5}, {4, 8}}));
    for (size_t j = i + 1; j < pieces.size(); ++j) CHECK_FALSE(pieces[i].intersects(pieces[j]));
  }
  CHECK(volume == 100 - 8);

  pieces.clear();
  subtract_box(Box{{0, 4}}, Box{{6, 9}}, pieces);  // disjoint: a itself
  REQUIRE(pieces.size() == 1);
  CHECK(pieces[0] == Box{{0, 4}});

  pieces.clear();
  subtract_box(Box{{2, 4}, {2, 4}}, Box{{0, 9}, {0, 9}}, pieces);  // covered: nothing
  CHECK(pieces.empty());

  pieces.clear();
  subtract_box(Box{{4, 2}}, Box{{0, 1}}, pieces);  // empty a: nothing
  CHECK(pieces.empty());

  pieces.push_back(Box{{7, 8}});  // appends, never clears
  subtract_box(Box{{0, 4}}, Box{{1, 2}}, pieces);
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[0] == Box{{7, 8}});
  CHECK(pieces[1] == Box{{0, 1}});
  CHECK(pieces[2] == Box{{2, 4}});
}

TEST_CASE("regions: Box::reset and Region::swap") {
  Box b{{3, 9}, {1, 4}, {0, 7}};
  b.reset(2);
  CHECK(b == Box::of_rank(2));
  CHECK(b.empty());
  b.reset(0);
  CHECK(b.rank() == 0);
  // A region with more boxes than the inline storage holds, swapped with an inline one and
  // with an empty one of another rank: each takes the other's boxes and rank.
  Region many(2), one(Box{{0, 2}, {0, 2}}), none(3);
  for (int64_t i = 0; i < 6; ++i) many.add(Box{{4 * i, 4 * i + 1}, {0, 1}});
  const Region many_copy = many, one_copy = one;
  many.swap(one);
  CHECK(many == one_copy);
  CHECK(one == many_copy);
  CHECK(one.boxes().size() == 6);
  one.swap(none);
  CHECK(one.empty());
  CHECK(one.rank() == 3);
  CHECK(none == many_copy);
  CHECK(none.rank() == 2);
}

TEST_CASE("box: linear runs of a row-major shape") {
  const std::vector<int64_t> shape = {4, 3, 5};
  CHECK(is_linear_run(Box{{2, 3}, {0, 3}, {0, 5}}, shape));  // one row
  CHECK(is_linear_run(Box{{1, 4}, {0, 3}, {0, 5}}, shape));  // rows
  CHECK(is_linear_run(Box{{2, 3}, {1, 2}, {1, 4}}, shape));  // part of one innermost row
  CHECK(is_linear_run(Box{{2, 3}, {1, 3}, {0, 5}}, shape));  // whole rows of one slab
  CHECK_FALSE(is_linear_run(Box{{1, 3}, {1, 2}, {0, 5}}, shape));  // one row of each of two slabs
  CHECK_FALSE(is_linear_run(Box{{2, 3}, {0, 2}, {1, 4}}, shape));  // parts of two rows
  CHECK(linear_begin(Box{{2, 3}, {1, 2}, {1, 4}}, shape) == 2 * 15 + 1 * 5 + 1);
  CHECK(linear_begin(Box::full(shape), shape) == 0);
  CHECK(is_linear_run(Box::of_rank(0), std::vector<int64_t>{}));  // the scalar
  CHECK(linear_begin(Box::of_rank(0), std::vector<int64_t>{}) == 0);
}
