// Box: an axis-aligned box of tensor elements, per dimension a half-open [begin, end).
// Pure geometry: no tensor data. Rank is at most kMaxRank. Trivially copyable.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace tessera {

inline constexpr int kMaxRank = 8;

// One dimension of a box. Empty when end <= begin.
struct Interval {
  int64_t begin = 0;
  int64_t end = 0;
  constexpr Interval() = default;
  constexpr Interval(int64_t b, int64_t e) : begin(b), end(e) {}
  // Saturates at INT64_MAX for intervals wider than int64 can count (e.g. [INT64_MIN, 1)).
  constexpr int64_t size() const {
    if (end <= begin) return 0;
    const uint64_t width = static_cast<uint64_t>(end) - static_cast<uint64_t>(begin);
    return width > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(width);
  }
  constexpr bool empty() const { return end <= begin; }
  friend constexpr bool operator==(const Interval&, const Interval&) = default;
};

class Box {
 public:
  Box() = default;
  // Box{{0, 7}} is one dimension [0, 7); Box{{6, 7}, {0, 32}} is two dimensions.
  Box(std::initializer_list<Interval> dims);
  // The full box of a shape: [0, shape[i]) per dimension.
  template <class Shape>
  static Box full(const Shape& shape) {
    Box b;
    b.rank_ = static_cast<int>(shape.size());
    for (int i = 0; i < b.rank_; ++i) b.dims_[i] = Interval(0, shape[i]);
    return b;
  }
  static Box of_rank(int rank);  // every dimension [0, 0): empty
  // Becomes Box::of_rank(rank) in place (writes only the first `rank` dimensions: cheaper than
  // assigning a new box in a hot loop).
  void reset(int rank) {
    rank_ = rank;
    for (int i = 0; i < rank; ++i) dims_[i] = Interval();
  }

  int rank() const { return rank_; }
  const Interval& operator[](int i) const { return dims_[i]; }
  Interval& operator[](int i) { return dims_[i]; }
  int64_t begin(int i) const { return dims_[i].begin; }
  int64_t end(int i) const { return dims_[i].end; }
  int64_t extent(int i) const { return dims_[i].size(); }

  // A box of rank 0 holds exactly one element (a scalar); otherwise empty if any dim is empty.
  bool empty() const;
  int64_t volume() const;  // saturates at INT64_MAX
  bool contains(const Box& other) const;  // other empty -> true
  bool contains_point(const int64_t* index) const;
  bool intersects(const Box& other) const;
  Box intersect(const Box& other) const;  // may be empty
  Box hull(const Box& other) const;       // bounding box; an empty side is ignored
  // True when every dimension lies inside [0, shape[i]).
  template <class Shape>
  bool inside(const Shape& shape) const {
    if (static_cast<int>(shape.size()) != rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i].begin < 0 || dims_[i].end > shape[i] || dims_[i].begin > dims_[i].end)
        return false;
    return true;
  }
  std::string to_string() const;

  friend bool operator==(const Box& a, const Box& b);
  friend bool operator<(const Box& a, const Box& b);  // lexicographic on begins then ends

 private:
  int rank_ = 0;
  std::array<Interval, kMaxRank> dims_{};
};

// Row-major linear indices of the elements of a tensor of `shape` (outermost dimension first):
// whether those of a non-empty `box` are one run of consecutive indices (every dimension after
// the first one the box spans with more than one element is whole), and the index of the box's
// first element.
bool is_linear_run(const Box& box, std::span<const int64_t> shape);
int64_t linear_begin(const Box& box, std::span<const int64_t> shape);

}  // namespace tessera
