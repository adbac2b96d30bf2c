#include "regions/box.h"

#include "absl/strings/str_cat.h"

namespace tessera {

Box::Box(std::initializer_list<Interval> dims) {
  rank_ = static_cast<int>(std::min<size_t>(dims.size(), kMaxRank));
  int i = 0;
  for (const Interval& d : dims) {
    if (i == rank_) break;
    dims_[i++] = d;
  }
}

Box Box::of_rank(int rank) {
  Box b;
  b.rank_ = rank;
  return b;
}

bool Box::empty() const {
  for (int i = 0; i < rank_; ++i)
    if (dims_[i].empty()) return true;
  return false;
}

int64_t Box::volume() const {
  // Saturates instead of overflowing: a box inside any node's shape never does (Graph checks
  // that shapes' element counts fit int64), but callers may measure boxes of any extent.
  int64_t v = 1;
  bool overflow = false;
  for (int i = 0; i < rank_; ++i) {
    const int64_t size = dims_[i].size();
    if (size == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(v, size, &v);
  }
  return overflow ? INT64_MAX : v;
}

bool Box::contains(const Box& other) const {
  if (other.empty()) return true;
  for (int i = 0; i < rank_; ++i)
    if (other.dims_[i].begin < dims_[i].begin || other.dims_[i].end > dims_[i].end) return false;
  return !empty();
}

bool Box::contains_point(const int64_t* index) const {
  for (int i = 0; i < rank_; ++i)
    if (index[i] < dims_[i].begin || index[i] >= dims_[i].end) return false;
  return true;
}

bool Box::intersects(const Box& other) const {
  // Same as !intersect(other).empty(), without building the box (a hot test in Region).
  for (int i = 0; i < rank_; ++i)
    if (std::max(dims_[i].begin, other.dims_[i].begin) >=
        std::min(dims_[i].end, other.dims_[i].end))
      return false;
  return true;
}

Box Box::intersect(const Box& other) const {
  Box r = *this;
  for (int i = 0; i < rank_; ++i) {
    r.dims_[i].begin = std::max(dims_[i].begin, other.dims_[i].begin);
    r.dims_[i].end = std::min(dims_[i].end, other.dims_[i].end);
  }
  return r;
}

Box Box::hull(const Box& other) const {
  if (other.empty()) return *this;
  if (empty()) return other;
  Box r = *this;
  for (int i = 0; i < rank_; ++i) {
    r.dims_[i].begin = std::min(dims_[i].begin, other.dims_[i].begin);
    r.dims_[i].end = std::max(dims_[i].end, other.dims_[i].end);
  }
  return r;
}

std::string Box::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i)
    absl::StrAppend(&s, i ? ", " : "", dims_[i].begin, ":", dims_[i].end);
  return s + "]";
}

bool operator==(const Box& a, const Box& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i)
    if (!(a.dims_[i] == b.dims_[i])) return false;
  return true;
}

bool operator<(const Box& a, const Box& b) {
  if (a.rank_ != b.rank_) return a.rank_ < b.rank_;
  for (int i = 0; i < a.rank_; ++i)
    if (a.dims_[i].begin != b.dims_[i].begin) return a.dims_[i].begin < b.dims_[i].begin;
  for (int i = 0; i < a.rank_; ++i)
    if (a.dims_[i].end != b.dims_[i].end) return a.dims_[i].end < b.dims_[i].end;
  return false;
}

bool is_linear_run(const Box& box, std::span<const int64_t> shape) {
  int d = 0;
  while (d < box.rank() && box.extent(d) == 1) ++d;
  for (++d; d < box.rank(); ++d)
    if (box.begin(d) != 0 || box.end(d) != shape[static_cast<size_t>(d)]) return false;
  return true;
}

int64_t linear_begin(const Box& box, std::span<const int64_t> shape) {
  int64_t at = 0;
  for (int d = 0; d < box.rank(); ++d) at = at * shape[static_cast<size_t>(d)] + box.begin(d);
  return at;
}

}  // namespace tessera
