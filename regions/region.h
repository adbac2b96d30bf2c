// Region: a set of elements of one tensor, stored as disjoint boxes of one rank.
// Canonical form: boxes are disjoint, non-empty, adjacent boxes that differ in a single
// dimension are coalesced (so appending a row to a block of rows stays one box), and the
// boxes are sorted. Small regions (up to 4 boxes) do not allocate.
#pragma once

#include <span>
#include <string>

#include "absl/container/inlined_vector.h"
#include "regions/box.h"

namespace tessera {

class Region {
 public:
  using Boxes = absl::InlinedVector<Box, 4>;

  Region() = default;
  explicit Region(int rank) : rank_(rank) {}
  explicit Region(const Box& box);  // empty boxes give an empty region of that rank
  template <class Shape>
  static Region full(const Shape& shape) {
    return Region(Box::full(shape));
  }

  int rank() const { return rank_; }
  bool empty() const { return boxes_.empty(); }
  const Boxes& boxes() const { return boxes_; }
  int64_t volume() const;
  // Empty region -> empty box of this rank (rank 0 has no empty box: then the scalar box).
  Box bounding_box() const;

  bool contains(const Box& box) const;
  bool contains(const Region& other) const;
  bool intersects(const Box& box) const;

  Region unite(const Region& other) const;
  Region unite(const Box& box) const;
  Region intersect(const Region& other) const;
  Region intersect(const Box& box) const;
  Region subtract(const Region& other) const;
  Region subtract(const Box& box) const;

  // In place union; boxes covered by `box` are replaced by it. `box` may alias boxes().
  void add(const Box& box);
  void remove(const Box& box);       // in place difference; `box` may alias boxes()
  void add(const Region& other);     // other may be *this
  void remove(const Region& other);  // other may be *this (the region becomes empty)
  void clear() { boxes_.clear(); }

  // Replaces the region by its bounding box when it holds more than max_boxes boxes
  // (an over-approximation, used where a superset is safe).
  void cap(int max_boxes);

  std::string to_string() const;
  friend bool operator==(const Region& a, const Region& b);  // same element set

 private:
  // Restores the canonical form, given that boxes_[0, settled) already are in it among
  // themselves (sorted, non-empty, no two mergeable) and all boxes are disjoint.
  void canonicalize(size_t settled);
  int rank_ = 0;
  Boxes boxes_;
};

// Appends the boxes of a \ b (at most 2 * rank disjoint boxes) to out.
void subtract_box(const Box& a, const Box& b, Region::Boxes& out);

}  // namespace tessera
