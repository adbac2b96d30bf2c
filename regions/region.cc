#include "regions/region.h"

#include <algorithm>
#include <utility>
#include <vector>

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
  if (boxes_.empty()) return Box::of_rank(rank_);
  Box r = boxes_[0];  // canonical boxes are non-empty: the hull is a plain min / max
  for (size_t i = 1; i < boxes_.size(); ++i)
    for (int d = 0; d < rank_; ++d) {
      r[d].begin = std::min(r[d].begin, boxes_[i].begin(d));
      r[d].end = std::max(r[d].end, boxes_[i].end(d));
    }
  return r;
}

// Boxes are sorted by their begins, the first dimension's begin first: every box from
// window_end(box) on begins at or after box's end in that dimension and cannot meet it.
size_t Region::window_end(const Box& box) const {
  if (box.rank() == 0 || rank_ == 0) return boxes_.size();
  const int64_t end = box.end(0);
  return static_cast<size_t>(std::partition_point(boxes_.begin(), boxes_.end(),
                                                  [&](const Box& b) { return b.begin(0) < end; }) -
                             boxes_.begin());
}

// The first index whose box begins at or after `begin` in the first dimension.
static size_t first_beginning_at(const Region::Boxes& boxes, int64_t begin) {
  return static_cast<size_t>(
      std::partition_point(boxes.begin(), boxes.end(),
                           [&](const Box& b) { return b.begin(0) < begin; }) -
      boxes.begin());
}

bool Region::contains(const Box& box) const {
  if (box.empty()) return true;
  Boxes rest{box};
  const size_t end = window_end(box);
  for (size_t i = 0; i < end; ++i) {
    const Box& b = boxes_[i];
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
  const size_t end = window_end(box);
  for (size_t i = 0; i < end; ++i)
    if (boxes_[i].intersects(box)) return true;
  return false;
}

void Region::add(const Box& box_ref) {
  if (box_ref.empty()) return;
  // Fast paths (region analysis adds one box at a time to mostly one-box regions): a single
  // box is already canonical.
  if (boxes_.empty()) {
    rank_ = box_ref.rank();
    boxes_.push_back(box_ref);
    return;
  }
  if (boxes_.size() == 1) {
    if (boxes_[0].contains(box_ref)) return;
    if (box_ref.contains(boxes_[0])) {
      boxes_[0] = box_ref;
      return;
    }
  }
  const Box box = box_ref;  // box_ref may alias one of boxes_, which is edited below
  // Drop the boxes the new one covers, so that a covering write collapses fragments into one
  // box (otherwise a fully covered box would leave the fragments untouched).
  // A covered box begins inside `box` in the first dimension: only that slice of the sorted
  // boxes is searched.
  const size_t covered_begin = box.rank() == 0 ? 0 : first_beginning_at(boxes_, box.begin(0));
  const auto window = boxes_.begin() + static_cast<std::ptrdiff_t>(window_end(box));
  boxes_.erase(std::remove_if(boxes_.begin() + static_cast<std::ptrdiff_t>(covered_begin), window,
                              [&](const Box& b) { return box.contains(b); }),
               window);
  Boxes pieces{box};
  const size_t end = window_end(box);
  for (size_t i = 0; i < end; ++i) {
    const Box& b = boxes_[i];
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
  const size_t end = window_end(box);
  size_t first = 0;
  while (first < end && !boxes_[first].intersects(box)) ++first;
  if (first == end) return;  // nothing removed
  Boxes fragments;
  size_t kept = first;
  for (size_t i = first; i < boxes_.size(); ++i) {
    if (i < end && boxes_[i].intersects(box)) {
      subtract_box(boxes_[i], box, fragments);
    } else {
      boxes_[kept++] = boxes_[i];
    }
  }
  boxes_.resize(kept);
  for (const Box& f : fragments) boxes_.push_back(f);
  canonicalize(kept);
}

void Region::add(const Region& other) {
  if (&other == this) return;  // a | a == a; iterating our own boxes while editing them is not safe
  if (other.empty()) return;
  if (empty()) {  // what adding the canonical boxes one by one would give, without the search
    rank_ = other.rank_;
    boxes_ = other.boxes_;
    return;
  }
  for (const Box& b : other.boxes_) add(b);
}

void Region::remove(const Region& other) {
  if (&other == this) {  // remove(Box) swaps boxes_, which would free the boxes being iterated
    clear();
    return;
  }
  if (empty() || other.empty()) return;
  if (other.boxes_.size() <= boxes_.size()) {  // each removal searches only a window of ours
    for (const Box& b : other.boxes_) {
      remove(b);
      if (empty()) return;
    }
    return;
  }
  // Many boxes to remove from few: those outside our bounding box remove nothing. The box only
  // shrinks as boxes are removed, so the one taken first stays a valid filter.
  const Box hull = bounding_box();
  for (const Box& b : other.boxes_) {
    if (hull.rank() > 0 && b.begin(0) >= hull.end(0)) break;  // sorted: so do all later ones
    if (!b.intersects(hull)) continue;
    remove(b);
    if (empty()) return;
  }
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
  const size_t end = window_end(box);
  for (size_t k = 0; k < end; ++k) {
    Box i = boxes_[k].intersect(box);
    if (!i.empty()) r.boxes_.push_back(i);
  }
  r.canonicalize(0);
  return r;
}

Region Region::intersect(const Region& other) const {
  Region r(rank_);
  if (empty() || other.empty()) return r;
  const Box other_hull = other.bounding_box();
  for (const Box& a : boxes_) {
    if (!a.intersects(other_hull)) continue;
    const size_t end = other.window_end(a);
    for (size_t k = 0; k < end; ++k) {
      Box i = a.intersect(other.boxes_[k]);
      if (!i.empty())
        r.boxes_.push_back(i);  // pairwise intersections of disjoint sets are disjoint
    }
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

void Region::shrink_to(int max_boxes) {
  if (static_cast<int>(boxes_.size()) <= max_boxes) return;
  coalesce();
  if (static_cast<int>(boxes_.size()) <= max_boxes) return;
  if (max_boxes <= 0) {
    boxes_.clear();
    return;
  }
  // Rank by volume (largest first, ties by position) and keep the first max_boxes. Dropping
  // boxes never makes two remaining ones mergeable and the kept ones keep their order, so the
  // result stays canonical.
  std::vector<std::pair<int64_t, size_t>> ranked(boxes_.size());
  for (size_t i = 0; i < boxes_.size(); ++i) ranked[i] = {-boxes_[i].volume(), i};
  const auto cut = ranked.begin() + max_boxes;
  std::nth_element(ranked.begin(), cut, ranked.end());
  std::vector<bool> keep(boxes_.size(), false);
  for (auto it = ranked.begin(); it != cut; ++it) keep[it->second] = true;
  size_t kept = 0;
  for (size_t i = 0; i < boxes_.size(); ++i)
    if (keep[i]) boxes_[kept++] = boxes_[i];
  boxes_.resize(kept);
}

void Region::coalesce() {
  if (boxes_.size() < 2) return;
  const Box hull = bounding_box();
  if (volume() == hull.volume()) {  // disjoint boxes filling their bounding box
    boxes_.clear();
    boxes_.push_back(hull);
    return;
  }
  // The canonical form already merges pairs; here runs of up to kSpan neighbours (in the
  // sorted order) that exactly fill their hull (e.g. a pinwheel of five boxes) become that
  // hull. Disjoint boxes fill it when their volumes add up to its volume; then no other box
  // meets it, and adding it drops exactly the run.
  constexpr size_t kSpan = 8;
  for (size_t i = 0; i + 1 < boxes_.size();) {
    bool filled = false;
    Box h = boxes_[i];
    int64_t run_volume = h.volume();
    for (size_t j = i + 1; j < std::min(boxes_.size(), i + kSpan) && !filled; ++j) {
      h = h.hull(boxes_[j]);
      run_volume += boxes_[j].volume();
      filled = run_volume == h.volume();
    }
    if (filled) {
      add(h);
      i = i > 0 ? i - 1 : 0;
    } else {
      ++i;
    }
  }
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
      // Cheap test first: a partner has the same first-dimension interval or touches it there.
      const Box& b = boxes_[k];
      const bool candidate = fresh.rank() == 0 || b[0] == fresh[0] || b.end(0) == fresh.begin(0) ||
                             b.begin(0) == fresh.end(0);
      if (!candidate || !try_merge(fresh, boxes_[k])) {
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
