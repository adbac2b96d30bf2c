#include "regions/region.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera {

void subtract_box(const Box& a, const Box& b, Region::Boxes& out) {
  if (a.empty()) return;
  Box overlap = a.intersect(b);
  if (overlap.empty()) {
    out.push_back(a);
    return;
  }
  // Peel off the slabs of `a` outside `b` one dimension at a time; what remains shrinks
  // towards the overlap.
  Box rest = a;
  for (int d = 0; d < a.rank(); ++d) {
    if (rest.begin(d) < overlap.begin(d)) {
      Box slab = rest;
      slab[d] = Interval(rest.begin(d), overlap.begin(d));
      out.push_back(slab);
    }
    if (overlap.end(d) < rest.end(d)) {
      Box slab = rest;
      slab[d] = Interval(overlap.end(d), rest.end(d));
      out.push_back(slab);
    }
    rest[d] = overlap[d];
  }
}

Region::Region(const Box& box) : rank_(box.rank()) {
  if (!box.empty()) boxes_.push_back(box);
}

int64_t Region::volume() const {
  int64_t v = 0;
  for (const Box& b : boxes_) v += b.volume();
  return v;
}

Box Region::bounding_box() const {
  Box r = Box::of_rank(rank_);
  for (const Box& b : boxes_) r = r.hull(b);
  return r;
}

bool Region::contains(const Box& box) const {
  if (box.empty()) return true;
  Boxes rest{box};
  for (const Box& b : boxes_) {
    if (!b.intersects(box)) continue;
    Boxes next;
    for (const Box& r : rest) subtract_box(r, b, next);
    rest.swap(next);
    if (rest.empty()) return true;
  }
  return rest.empty();
}

bool Region::contains(const Region& other) const {
  for (const Box& b : other.boxes_)
    if (!contains(b)) return false;
  return true;
}

bool Region::intersects(const Box& box) const {
  for (const Box& b : boxes_)
    if (b.intersects(box)) return true;
  return false;
}

void Region::add(const Box& box_ref) {
  if (box_ref.empty()) return;
  const Box box = box_ref;  // box_ref may alias one of boxes_, which is edited below
  if (boxes_.empty()) rank_ = box.rank();
  // Drop the boxes the new one covers, so that a covering write collapses fragments into one
  // box (otherwise a fully covered box would leave the fragments untouched).
  boxes_.erase(
      std::remove_if(boxes_.begin(), boxes_.end(), [&](const Box& b) { return box.contains(b); }),
      boxes_.end());
  Boxes pieces{box};
  for (const Box& b : boxes_) {
    if (!b.intersects(box)) continue;
    Boxes next;
    for (const Box& p : pieces) subtract_box(p, b, next);
    pieces.swap(next);
    if (pieces.empty()) return;
  }
  const size_t settled = boxes_.size();
  for (const Box& p : pieces) boxes_.push_back(p);
  canonicalize(settled);
}

void Region::remove(const Box& box_ref) {
  if (box_ref.empty() || boxes_.empty()) return;
  const Box box = box_ref;  // box_ref may alias one of boxes_, which is compacted below
  // Untouched boxes keep their order and stay canonical among themselves; only the fragments
  // of the boxes that `box` cuts need merging.
  Boxes fragments;
  size_t kept = 0;
  for (size_t i = 0; i < boxes_.size(); ++i) {
    if (boxes_[i].intersects(box)) {
      subtract_box(boxes_[i], box, fragments);
    } else {
      boxes_[kept++] = boxes_[i];
    }
  }
  if (kept == boxes_.size()) return;  // nothing removed
  boxes_.resize(kept);
  for (const Box& f : fragments) boxes_.push_back(f);
  canonicalize(kept);
}

void Region::add(const Region& other) {
  if (&other == this) return;  // a | a == a; iterating our own boxes while editing them is not safe
  for (const Box& b : other.boxes_) add(b);
}

void Region::remove(const Region& other) {
  if (&other == this) {  // remove(Box) swaps boxes_, which would free the boxes being iterated
    clear();
    return;
  }
  for (const Box& b : other.boxes_) remove(b);
}

Region Region::unite(const Region& other) const {
  Region r = *this;
  r.add(other);
  return r;
}

Region Region::unite(const Box& box) const {
  Region r = *this;
  r.add(box);
  return r;
}

Region Region::intersect(const Box& box) const {
  Region r(rank_);
  for (const Box& b : boxes_) {
    Box i = b.intersect(box);
    if (!i.empty()) r.boxes_.push_back(i);
  }
  r.canonicalize(0);
  return r;
}

Region Region::intersect(const Region& other) const {
  Region r(rank_);
  for (const Box& a : boxes_)
    for (const Box& b : other.boxes_) {
      Box i = a.intersect(b);
      if (!i.empty())
        r.boxes_.push_back(i);  // pairwise intersections of disjoint sets are disjoint
    }
  r.canonicalize(0);
  return r;
}

Region Region::subtract(const Region& other) const {
  Region r = *this;
  r.remove(other);
  return r;
}

Region Region::subtract(const Box& box) const {
  Region r = *this;
  r.remove(box);
  return r;
}

void Region::cap(int max_boxes) {
  if (static_cast<int>(boxes_.size()) <= max_boxes) return;
  Box hull = bounding_box();
  boxes_.clear();
  boxes_.push_back(hull);
}

// Two boxes merge when they agree on every dimension but one, where they touch.
static bool try_merge(Box& a, const Box& b) {
  int differing = -1;
  for (int d = 0; d < a.rank(); ++d) {
    if (a[d] == b[d]) continue;
    if (differing >= 0) return false;
    differing = d;
  }
  if (differing < 0) return true;  // identical (cannot happen for disjoint boxes)
  Interval& x = a[differing];
  const Interval& y = b[differing];
  if (x.end == y.begin) {
    x.end = y.end;
    return true;
  }
  if (y.end == x.begin) {
    x.begin = y.begin;
    return true;
  }
  return false;
}

void Region::canonicalize(size_t settled) {
  boxes_.erase(std::remove_if(boxes_.begin() + static_cast<std::ptrdiff_t>(settled), boxes_.end(),
                              [](const Box& b) { return b.empty(); }),
               boxes_.end());
  // Settle the other boxes one at a time: grow each by absorbing partners until none fits.
  // Settled boxes are never grown, so an add scans the boxes once per merge, not all pairs.
  while (settled < boxes_.size()) {
    Box fresh = boxes_.back();
    boxes_.pop_back();
    for (size_t k = 0; k < boxes_.size();) {
      if (!try_merge(fresh, boxes_[k])) {
        ++k;
        continue;
      }
      boxes_.erase(boxes_.begin() + static_cast<std::ptrdiff_t>(k));
      if (k < settled) --settled;
      k = 0;  // the grown box may now merge with a box already passed
    }
    // The settled prefix stays sorted, so the result needs no final sort.
    const auto end = boxes_.begin() + static_cast<std::ptrdiff_t>(settled);
    boxes_.insert(std::upper_bound(boxes_.begin(), end, fresh), fresh);
    ++settled;
  }
}

std::string Region::to_string() const {
  std::string s = "{";
  for (size_t i = 0; i < boxes_.size(); ++i)
    absl::StrAppend(&s, i ? " " : "", boxes_[i].to_string());
  return s + "}";
}

bool operator==(const Region& a, const Region& b) {
  if (a.boxes_ == b.boxes_) return true;  // the common case; the form is not unique, though
  return a.volume() == b.volume() && a.contains(b);
}

}  // namespace tessera
