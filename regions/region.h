// Region: a set of elements of one tensor, stored as disjoint boxes of one rank.
// Canonical form: boxes are disjoint, non-empty, adjacent boxes that differ in a single
// dimension are coalesced (so appending a row to a block of rows stays one box), and the
// boxes are sorted (by the begins, so the first dimension's begin is the primary key: queries
// use it to skip boxes that lie past a box cheaply). A region of one box (the common case: a
// decode step's rows, a kept cache's valid rows) does not allocate; one inline box keeps a
// Region at ~150 bytes, so the per-node tables a read and a write walk (valid, need, dirt,
// steps) stay a few lines per node (with four inline boxes, ~560 bytes, a SmolLM2 decode step
// planned in ~200 us and wrote in ~100; with one, ~160 and ~65).
//
// Two ways to bound the box count, for opposite uses:
//   cap(n):       a SUPERSET (bounding box), for need regions: computing more is only slower;
//   shrink_to(n): a SUBSET (largest boxes), for valid regions: forgetting validity only costs
//                 recomputation, while claiming it for stale values would be a correctness bug.
#pragma once

#include <span>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "regions/box.h"

namespace tessera {

class Region {
 public:
  using Boxes = absl::InlinedVector<Box, 1>;

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
  // Becomes the empty region of `rank` in place (assigning Region(rank) would copy the whole
  // inline storage).
  void reset(int rank) {
    boxes_.clear();
    rank_ = rank;
  }
  // Exchanges contents (moving a Region copies its whole inline storage; a swap with an empty
  // one moves only the boxes held).
  void swap(Region& other) noexcept {
    std::swap(rank_, other.rank_);
    boxes_.swap(other.boxes_);
  }

  // Replaces the region by its bounding box when it holds more than max_boxes boxes
  // (an over-approximation, used where a superset is safe).
  void cap(int max_boxes);
  // Under-approximation to at most max_boxes boxes (max_boxes >= 0), used where a subset is
  // safe (valid regions). Unchanged when already within budget. Otherwise first coalesces
  // without losing elements (groups of boxes whose union is one box become that box), then,
  // if still over budget, keeps the max_boxes boxes of largest volume (ties: the earlier
  // box) and drops the rest. The result is a subset of the original, in canonical form.
  void shrink_to(int max_boxes);

  std::string to_string() const;
  friend bool operator==(const Region& a, const Region& b);  // same element set

 private:
  // Boxes [0, end) may intersect `box` (all later boxes begin at or after its end in
  // the first dimension); a rank-0 region has at most its one box.
  size_t window_end(const Box& box) const;
  // Replaces groups of boxes whose union is a box by that box (same element set).
  void coalesce();
  // Restores the canonical form, given that boxes_[0, settled) already are in it among
  // themselves (sorted, non-empty, no two mergeable) and all boxes are disjoint.
  void canonicalize(size_t settled);
  int rank_ = 0;
  Boxes boxes_;
};

// Appends the boxes of a \ b (at most 2 * rank disjoint boxes) to out.
void subtract_box(const Box& a, const Box& b, Region::Boxes& out);

}  // namespace tessera
