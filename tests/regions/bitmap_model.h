// The brute-force model the region tests check against: a dense bitmap over a small universe
// [0, extent)^rank, random boxes and regions built from it, and the canonical-form check.
// Header-only, shared by the test files of tests/regions.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "regions/box.h"
#include "regions/region.h"

namespace tessera::region_model {

// The model: a dense bitmap over the universe [0, extent)^rank.
struct Space {
  int rank = 1;
  int64_t extent = 7;

  std::vector<int64_t> shape() const {
    return std::vector<int64_t>(static_cast<size_t>(rank), extent);
  }
  size_t cells() const {
    size_t n = 1;
    for (int d = 0; d < rank; ++d) n *= static_cast<size_t>(extent);
    return n;
  }
  size_t linear(const int64_t* index) const {
    size_t l = 0;
    for (int d = 0; d < rank; ++d)
      l = l * static_cast<size_t>(extent) + static_cast<size_t>(index[d]);
    return l;
  }
};

using Bits = std::vector<uint8_t>;

// Calls fn(index) for every point of box clamped to the universe (nothing for an empty box).
template <class Fn>
inline void for_each_point(const Space& space, const Box& box, Fn&& fn) {
  int64_t lo[kMaxRank], hi[kMaxRank], index[kMaxRank];
  for (int d = 0; d < space.rank; ++d) {
    lo[d] = std::max<int64_t>(box.begin(d), 0);
    hi[d] = std::min<int64_t>(box.end(d), space.extent);
    if (lo[d] >= hi[d]) return;
    index[d] = lo[d];
  }
  while (true) {
    fn(static_cast<const int64_t*>(index));
    int d = space.rank - 1;
    while (d >= 0 && ++index[d] == hi[d]) {
      index[d] = lo[d];
      --d;
    }
    if (d < 0) return;
  }
}

inline Bits bits_of(const Space& space, const Box& box) {
  Bits bits(space.cells(), 0);
  for_each_point(space, box, [&](const int64_t* i) { bits[space.linear(i)] = 1; });
  return bits;
}

// Bitmap of a region; *overlaps counts cells covered by more than one box.
inline Bits bits_of(const Space& space, const Region& region, int64_t* overlaps = nullptr) {
  Bits bits(space.cells(), 0);
  int64_t twice = 0;
  for (const Box& b : region.boxes())
    for_each_point(space, b, [&](const int64_t* i) {
      uint8_t& cell = bits[space.linear(i)];
      twice += cell;
      cell = 1;
    });
  if (overlaps != nullptr) *overlaps = twice;
  return bits;
}

inline int64_t popcount(const Bits& a) {
  return std::count(a.begin(), a.end(), uint8_t{1});
}

inline Bits bits_or(Bits a, const Bits& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] |= b[i];
  return a;
}
inline Bits bits_and(Bits a, const Bits& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] &= b[i];
  return a;
}
inline Bits bits_minus(Bits a, const Bits& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] &= static_cast<uint8_t>(!b[i]);
  return a;
}
inline bool bits_subset(const Bits& a, const Bits& b) {
  return popcount(bits_minus(a, b)) == 0;
}
inline bool bits_meet(const Bits& a, const Bits& b) {
  return popcount(bits_and(a, b)) != 0;
}

// The bounding box of a bitmap, or nullopt-like `false` when the bitmap is empty.
inline bool bits_bounding_box(const Space& space, const Bits& bits, Box* out) {
  Box full = Box::full(space.shape());
  Box hull = Box::of_rank(space.rank);
  bool any = false;
  for_each_point(space, full, [&](const int64_t* i) {
    if (!bits[space.linear(i)]) return;
    for (int d = 0; d < space.rank; ++d) {
      if (!any || i[d] < hull[d].begin) hull[d].begin = i[d];
      if (!any || i[d] + 1 > hull[d].end) hull[d].end = i[d] + 1;
    }
    any = true;
  });
  *out = hull;
  return any;
}

struct Rng {
  std::mt19937_64 engine;
  explicit Rng(uint64_t seed) : engine(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine);
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(engine) < p; }
};

// A random box with corners in [0, extent]: sometimes empty (equal or inverted ends), sometimes
// full in a dimension, sometimes a slab (full everywhere but one dimension) to provoke merges.
inline Box random_box(Rng& rng, const Space& space) {
  Box b = Box::of_rank(space.rank);
  const int slab_dim = rng.chance(0.25) ? static_cast<int>(rng.uniform(0, space.rank - 1)) : -1;
  for (int d = 0; d < space.rank; ++d) {
    int64_t x = rng.uniform(0, space.extent), y = rng.uniform(0, space.extent);
    const double roll = rng.uniform(0, 99) / 100.0;
    if (slab_dim >= 0 && d != slab_dim) {
      b[d] = Interval(0, space.extent);
    } else if (roll < 0.06) {
      b[d] = Interval(std::max(x, y), std::min(x, y));  // empty: inverted or equal ends
    } else if (roll < 0.16) {
      b[d] = Interval(0, space.extent);
    } else {
      b[d] = Interval(std::min(x, y), std::max(x, y));  // empty when x == y
    }
  }
  return b;
}

inline Space random_space(Rng& rng) {
  Space s;
  s.rank = static_cast<int>(rng.uniform(1, 4));
  s.extent = rng.uniform(1, 7);
  return s;
}

// Asserts the canonical form: rank, every box non-empty and inside the universe, sorted
// without repeats, pairwise disjoint, no two boxes that could be coalesced, volume = popcount
// = bitmap of the model.
inline void require_canonical(const Space& space, const Region& region, const Bits& model) {
  INFO("region: ", region.to_string());
  REQUIRE(region.rank() == space.rank);
  const auto& boxes = region.boxes();
  for (const Box& b : boxes) {
    INFO("box: ", b.to_string());
    REQUIRE(b.rank() == space.rank);
    REQUIRE_FALSE(b.empty());
    REQUIRE(b.inside(space.shape()));
  }
  for (size_t i = 0; i + 1 < boxes.size(); ++i) REQUIRE(boxes[i] < boxes[i + 1]);
  for (size_t i = 0; i < boxes.size(); ++i)
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      INFO("pair: ", boxes[i].to_string(), " ", boxes[j].to_string());
      REQUIRE_FALSE(boxes[i].intersects(boxes[j]));
      int differing = 0, touching = 0;
      for (int d = 0; d < space.rank; ++d) {
        if (boxes[i][d] == boxes[j][d]) continue;
        ++differing;
        touching += boxes[i].end(d) == boxes[j].begin(d) || boxes[j].end(d) == boxes[i].begin(d);
      }
      REQUIRE_FALSE((differing == 1 && touching == 1));  // should have been coalesced
    }
  int64_t overlaps = 0;
  const Bits bits = bits_of(space, region, &overlaps);
  REQUIRE(overlaps == 0);
  REQUIRE(bits == model);
  REQUIRE(region.volume() == popcount(model));
  REQUIRE(region.empty() == (popcount(model) == 0));
}

// A random region built by a random sequence of add / remove of random boxes, checked against
// the model after every step.
inline Region random_region(Rng& rng, const Space& space, Bits* model) {
  Region r = rng.chance(0.5) ? Region(space.rank) : Region(random_box(rng, space));
  *model = bits_of(space, r.boxes().empty() ? Box::of_rank(space.rank) : r.boxes()[0]);
  require_canonical(space, r, *model);
  const int64_t ops = rng.uniform(0, 8);
  for (int64_t k = 0; k < ops; ++k) {
    const Box b = random_box(rng, space);
    const bool add = rng.chance(0.7);
    const std::string before = r.to_string();
    INFO("step ", k, ": ", before, add ? " + " : " - ", b.to_string());
    if (add) {
      r.add(b);
      *model = bits_or(*model, bits_of(space, b));
    } else {
      r.remove(b);
      *model = bits_minus(*model, bits_of(space, b));
    }
    require_canonical(space, r, *model);
  }
  return r;
}

// The boxes of a region re-added in reverse order: the same set, built differently.
inline Region rebuilt_reversed(const Region& region) {
  Region r(region.rank());
  for (auto it = region.boxes().rbegin(); it != region.boxes().rend(); ++it) r.add(*it);
  return r;
}

inline constexpr int kRandomCases = 4000;

}  // namespace tessera::region_model
