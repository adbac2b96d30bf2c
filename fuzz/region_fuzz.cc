// libFuzzer target: the region algebra against a brute-force bitmap over a small universe.
// The bytes are a program: each operation takes a random box (coordinates from the bytes, inside
// the universe, possibly inverted or empty) and unites, intersects or subtracts it, in place or
// through the functional forms; after each step the region must be canonical (sorted, disjoint,
// non-empty boxes inside the universe) and hold exactly the bitmap.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "regions/region.h"

namespace {

using tessera::Box;
using tessera::Interval;
using tessera::Region;

struct Universe {
  int rank;
  int64_t extent;
  size_t cells() const {
    size_t n = 1;
    for (int d = 0; d < rank; ++d) n *= static_cast<size_t>(extent);
    return n;
  }
  // Calls fn(linear index) for every point of `box` inside the universe.
  template <class Fn>
  void for_each(const Box& box, Fn&& fn) const {
    int64_t lo[8], hi[8], at[8];
    for (int d = 0; d < rank; ++d) {
      lo[d] = std::max<int64_t>(box.begin(d), 0);
      hi[d] = std::min<int64_t>(box.end(d), extent);
      if (lo[d] >= hi[d]) return;
      at[d] = lo[d];
    }
    while (true) {
      size_t linear = 0;
      for (int d = 0; d < rank; ++d) linear = linear * static_cast<size_t>(extent) + static_cast<size_t>(at[d]);
      fn(linear);
      int d = rank - 1;
      while (d >= 0 && ++at[d] == hi[d]) {
        at[d] = lo[d];
        --d;
      }
      if (d < 0) return;
    }
  }
};

[[noreturn]] void fail(const char* what, const Region& r) {
  std::fprintf(stderr, "region model mismatch: %s in %s\n", what, r.to_string().c_str());
  __builtin_trap();
}

Box take_box(FuzzedDataProvider& in, const Universe& u) {
  Box b = Box::of_rank(u.rank);
  for (int d = 0; d < u.rank; ++d) {
    const int64_t a = in.ConsumeIntegralInRange<int64_t>(0, u.extent);
    const int64_t c = in.ConsumeIntegralInRange<int64_t>(0, u.extent);
    b[d] = Interval(a, c);  // may be inverted or empty: both mean "no points"
  }
  return b;
}

std::vector<uint8_t> bits_of(const Universe& u, const Box& box) {
  std::vector<uint8_t> bits(u.cells(), 0);
  u.for_each(box, [&](size_t i) { bits[i] = 1; });
  return bits;
}

// Canonical form and equality with the model.
void check(const Universe& u, const Region& r, const std::vector<uint8_t>& model) {
  std::vector<uint8_t> bits(u.cells(), 0);
  const auto& boxes = r.boxes();
  const Box all = Box::full(std::vector<int64_t>(static_cast<size_t>(u.rank), u.extent));
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (boxes[i].rank() != u.rank || boxes[i].empty()) fail("empty or wrong-rank box", r);
    if (!all.contains(boxes[i])) fail("box outside the universe", r);
    if (i > 0 && !(boxes[i - 1] < boxes[i])) fail("boxes not sorted", r);
    u.for_each(boxes[i], [&](size_t k) {
      if (bits[k]) fail("overlapping boxes", r);
      bits[k] = 1;
    });
  }
  if (bits != model) fail("element set differs from the bitmap", r);
  int64_t count = 0;
  for (uint8_t b : model) count += b;
  if (r.volume() != count) fail("volume", r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const Universe u{in.ConsumeIntegralInRange<int>(1, 3), in.ConsumeIntegralInRange<int64_t>(1, 6)};
  Region region(u.rank);
  std::vector<uint8_t> model(u.cells(), 0);
  for (int step = 0; step < 64 && in.remaining_bytes() > 0; ++step) {
    const int op = in.ConsumeIntegralInRange<int>(0, 9);
    const Box box = take_box(in, u);
    const std::vector<uint8_t> bits = bits_of(u, box);
    const Region other(box);
    switch (op) {
      case 0: region.add(box); break;
      case 1: region.remove(box); break;
      case 2: region = region.unite(other); break;
      case 3: region = region.intersect(box); break;
      case 4: region = region.subtract(other); break;
      case 5: region.add(region); break;                 // aliasing
      case 6: region = region.intersect(region); break;  // aliasing
      case 7: region.shrink_to(in.ConsumeIntegralInRange<int>(0, 4)); break;
      case 8: region.cap(in.ConsumeIntegralInRange<int>(1, 4)); break;
      default: region.remove(region); break;
    }
    switch (op) {
      case 0: case 2: for (size_t i = 0; i < model.size(); ++i) model[i] |= bits[i]; break;
      case 1: case 4: for (size_t i = 0; i < model.size(); ++i) model[i] &= !bits[i]; break;
      case 3: for (size_t i = 0; i < model.size(); ++i) model[i] &= bits[i]; break;
      case 7: {  // a subset of the model: adopt it after checking
        std::vector<uint8_t> now(u.cells(), 0);
        for (const Box& b : region.boxes()) u.for_each(b, [&](size_t k) { now[k] = 1; });
        for (size_t i = 0; i < model.size(); ++i)
          if (now[i] && !model[i]) fail("shrink_to grew the region", region);
        model = now;
        break;
      }
      case 8: {  // a superset of the model
        std::vector<uint8_t> now(u.cells(), 0);
        for (const Box& b : region.boxes()) u.for_each(b, [&](size_t k) { now[k] = 1; });
        for (size_t i = 0; i < model.size(); ++i)
          if (model[i] && !now[i]) fail("cap lost elements", region);
        model = now;
        break;
      }
      case 9: std::fill(model.begin(), model.end(), 0); break;
      default: break;
    }
    check(u, region, model);
    // Queries agree with the model.
    bool contains = true, meets = false;
    u.for_each(box, [&](size_t k) {
      contains = contains && model[k];
      meets = meets || model[k];
    });
    if (region.contains(box) != contains && !box.empty()) fail("contains", region);
    if (region.intersects(box) != meets && !box.empty()) fail("intersects", region);
  }
  return 0;
}
