// Reshape: a view of the same row-major element order under another shape. Its rules map
// boxes through linear ranges (split into boxes, a covering superset only when fragmented).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

namespace {

using Boxes = Region::Boxes;

// ---- reshape geometry -----------------------------------------------------------------------
// A reshape keeps the row-major linear index of every element. Both rules map a box of one shape
// to boxes of the other through linear ranges, so they share reshape_map below.

// More runs than this in one box: map the single linear range covering them instead.
constexpr int64_t kMaxRuns = 64;
// More pieces than this within a group, or in the product over groups: cover them coarser.
constexpr int64_t kMaxBoxes = 64;

using Extents = std::span<const int64_t>;
using Blocks = std::array<int64_t, kMaxRank>;

// blocks[d] = volume of the dims after d (the row-major stride of dim d).
Blocks blocks_of(Extents shape) {
  Blocks blocks{};
  int64_t volume = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    blocks[d] = volume;
    volume *= shape[d];
  }
  return blocks;
}

// Appends disjoint boxes covering exactly the linear range [a, b) (relative to the sub-block of
// dims >= d, whose coordinates for dims < d are fixed in `box`). Per level a range is a partial
// head, a run of full slabs and a partial tail, so it yields at most 2 * rank - 1 boxes.
void range_boxes(Extents shape, const Blocks& blocks, int d, int64_t a, int64_t b, Box box,
                 Boxes& out) {
  if (a >= b) return;
  const int rank = static_cast<int>(shape.size());
  if (d == rank) {
    out.push_back(box);  // one element
    return;
  }
  const int64_t n = blocks[d];
  const int64_t i0 = a / n, i1 = (b - 1) / n;
  if (i0 == i1) {
    box[d] = Interval(i0, i0 + 1);
    range_boxes(shape, blocks, d + 1, a - i0 * n, b - i0 * n, box, out);
    return;
  }
  int64_t full_begin = i0, full_end = i1 + 1;
  if (a % n != 0) {
    box[d] = Interval(i0, i0 + 1);
    range_boxes(shape, blocks, d + 1, a - i0 * n, n, box, out);
    full_begin = i0 + 1;
  }
  if (b % n != 0) {
    box[d] = Interval(i1, i1 + 1);
    range_boxes(shape, blocks, d + 1, 0, b - i1 * n, box, out);
    full_end = i1;
  }
  if (full_begin < full_end) {
    box[d] = Interval(full_begin, full_end);
    for (int e = d + 1; e < rank; ++e) box[e] = Interval(0, shape[e]);
    out.push_back(box);
  }
}

// Maps a non-empty box of `from` to boxes of `to` (same volume). A box is a set of contiguous
// linear runs: the dims right of the last partial dim k are full, so each index of dims < k
// starts one run. Each run maps to at most 2 * rank - 1 boxes; a Region coalesces neighbours.
// Past kMaxRuns runs (or kMaxBoxes pieces, which also bounds the Region's quadratic
// coalescing) the single range from the first to the last element is mapped instead: sound.
void map_linear(Extents from, Extents to, const Box& box, Boxes& out) {
  const int from_rank = static_cast<int>(from.size());
  const Blocks from_blocks = blocks_of(from), to_blocks = blocks_of(to);
  Region mapped(static_cast<int>(to.size()));
  auto map_range = [&](int64_t a, int64_t b) {
    Boxes pieces;
    range_boxes(to, to_blocks, 0, a, b, Box::of_rank(static_cast<int>(to.size())), pieces);
    for (const Box& p : pieces) mapped.add(p);
  };
  int64_t first = 0, last = 0;
  for (int d = 0; d < from_rank; ++d) {
    first += box.begin(d) * from_blocks[d];
    last += (box.end(d) - 1) * from_blocks[d];
  }
  int k = from_rank - 1;
  while (k > 0 && box[k] == Interval(0, from[k])) --k;
  int64_t runs = 1;
  for (int d = 0; d < k; ++d) runs *= box.extent(d);
  bool fragmented = runs > kMaxRuns;
  if (!fragmented && from_rank > 0) {
    const int64_t run_length = box.extent(k) * from_blocks[k];
    int64_t index[kMaxRank];
    for (int d = 0; d < k; ++d) index[d] = box.begin(d);
    for (int d = 0; d >= 0 && !fragmented;) {
      int64_t start = box.begin(k) * from_blocks[k];
      for (int e = 0; e < k; ++e) start += index[e] * from_blocks[e];
      map_range(start, start + run_length);
      fragmented = static_cast<int64_t>(mapped.boxes().size()) > kMaxBoxes;
      for (d = k - 1; d >= 0; --d) {  // next run: odometer over dims < k
        if (++index[d] < box.end(d)) break;
        index[d] = box.begin(d);
      }
    }
  }
  if (fragmented || from_rank == 0) {
    mapped.clear();
    map_range(first, last + 1);  // rank 0: first = last = 0, the one element
  }
  for (const Box& b : mapped.boxes()) out.push_back(b);
}

// Splits a reshape into independent groups: consecutive dims of `from` and of `to` with equal
// volume ([T, H*D] -> [T, H, D] is {T}->{T} and {H*D}->{H, D}). Mapping each group on its own
// and taking the product keeps batch and row dims exact instead of counting them as runs.
struct ReshapeGroup {
  int from_begin, from_end, to_begin, to_end;
};

absl::InlinedVector<ReshapeGroup, 2 * kMaxRank> reshape_groups(const Shape& from, const Shape& to) {
  absl::InlinedVector<ReshapeGroup, 2 * kMaxRank> groups;
  const int from_rank = static_cast<int>(from.size()), to_rank = static_cast<int>(to.size());
  int i = 0, j = 0;
  while (i < from_rank || j < to_rank) {
    ReshapeGroup g{i, i, j, j};
    int64_t from_volume = 1, to_volume = 1;
    if (i < from_rank)
      from_volume *= from[i++];
    else
      to_volume *= to[j++];
    while (from_volume != to_volume) {
      // Equal total volumes (checked by infer) keep both indices in range here.
      if (from_volume < to_volume && i < from_rank)
        from_volume *= from[i++];
      else if (from_volume > to_volume && j < to_rank)
        to_volume *= to[j++];
      else
        break;
    }
    g.from_end = i;
    g.to_end = j;
    groups.push_back(g);
  }
  return groups;
}

// Maps a box of `from` to disjoint boxes of `to` covering the elements with the same linear
// indices: exact, or a superset when a group has more than kMaxRuns runs or the product of the
// groups' pieces exceeds kMaxBoxes. Used by both rules (forward: from = input; needed: reversed).
void reshape_map(const Shape& from, const Shape& to, const Box& box, Boxes& out) {
  if (box.empty()) return;
  const auto groups = reshape_groups(from, to);
  // Fast path (an LLM's [T, H * D] <-> [T, H, D] reshapes on every decode step): each group is
  // either one dimension on both sides (its interval carries over) or whole in `box` (whole on
  // the other side): the one box the general mapping below finds.
  {
    Box mapped = Box::of_rank(static_cast<int>(to.size()));
    bool simple = true;
    for (const ReshapeGroup& group : groups) {
      if (group.from_end - group.from_begin == 1 && group.to_end - group.to_begin == 1) {
        mapped[group.to_begin] = box[group.from_begin];
        continue;
      }
      for (int d = group.from_begin; d < group.from_end && simple; ++d)
        simple = box[d] == Interval(0, from[static_cast<size_t>(d)]);
      if (!simple) break;
      for (int d = group.to_begin; d < group.to_end; ++d) mapped[d] = Interval(0, to[static_cast<size_t>(d)]);
    }
    if (simple) {
      out.push_back(mapped);
      return;
    }
  }
  absl::InlinedVector<Boxes, 2 * kMaxRank> pieces(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const ReshapeGroup& group = groups[g];
    Box sub = Box::of_rank(group.from_end - group.from_begin);
    for (int d = 0; d < sub.rank(); ++d) sub[d] = box[group.from_begin + d];
    map_linear(
        Extents(from.data() + group.from_begin, static_cast<size_t>(sub.rank())),
        Extents(to.data() + group.to_begin, static_cast<size_t>(group.to_end - group.to_begin)),
        sub, pieces[g]);
    if (pieces[g].empty()) return;  // cannot happen for a non-empty box
  }
  auto product = [&] {
    int64_t n = 1;
    for (const Boxes& p : pieces) n *= static_cast<int64_t>(p.size());
    return n;
  };
  while (product() > kMaxBoxes) {
    auto most = std::max_element(pieces.begin(), pieces.end(), [](const Boxes& a, const Boxes& b) {
      return a.size() < b.size();
    });
    Box hull = Box::of_rank(most->front().rank());
    for (const Box& b : *most) hull = hull.hull(b);
    most->assign(1, hull);
  }
  absl::InlinedVector<size_t, 2 * kMaxRank> pick(groups.size(), 0);
  while (true) {
    Box b = Box::of_rank(static_cast<int>(to.size()));
    for (size_t g = 0; g < groups.size(); ++g) {
      const Box& p = pieces[g][pick[g]];
      for (int d = 0; d < p.rank(); ++d) b[groups[g].to_begin + d] = p[d];
    }
    out.push_back(b);
    int g = static_cast<int>(groups.size()) - 1;
    for (; g >= 0; --g) {
      if (++pick[g] < pieces[g].size()) break;
      pick[g] = 0;
    }
    if (g < 0) break;
  }
}

}  // namespace

// ---- reshape: ReshapeAttrs {shape} (the target, no -1: the builder resolves it) ------------
// Same volume, same dtype. forward: the dirty box's linear runs as output boxes (exact unless
// fragmented, see reshape_map); needed: the hull of the mapped pieces, one input box.
std::string ReshapeAttrs::to_string() const { return "reshape" + shape_string(shape); }

const OpDef kReshapeDef{
    .name = "reshape",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const Shape& shape = node.attrs_as<ReshapeAttrs>().shape;
          if (shape.size() > kMaxRank)
            fail("reshape", absl::StrCat("rank ", shape.size(), " exceeds ", kMaxRank));
          for (int64_t d : shape)
            if (d < 0) fail("reshape", absl::StrCat("negative dimension in ", shape_string(shape)));
          if (shape_volume(shape) != x.volume())
            fail("reshape",
                 absl::StrCat("volume mismatch: ", shape_string(x.shape), " (", x.volume(), ") to ",
                              shape_string(shape), " (", shape_volume(shape), ")"));
          node.shape = shape;
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph& g, const Node& node, int, const Box& dirty, Region& out) {
          Boxes boxes;
          reshape_map(input_node(g, node, 0).shape, node.shape, dirty, boxes);
          for (const Box& b : boxes) out.add(b);
        },
    .needed =
        [](const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
          const Shape& in_shape = input_node(g, node, 0).shape;
          Boxes boxes;
          reshape_map(node.shape, in_shape, out, boxes);
          // The kernel reads one input box: the hull of the mapped pieces (a sound superset).
          Box hull = Box::of_rank(static_cast<int>(in_shape.size()));
          for (const Box& b : boxes) hull = hull.hull(b);
          inputs[0] = hull;
        },
};

Tensor reshape(Tensor x, const Shape& shape) {
  Graph& g = builder_graph("reshape", {{"x", x}});
  const int64_t volume = g.node(x.id).volume();
  Shape resolved = shape;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      if (infer_at >= 0) fail("reshape", "more than one -1 in " + shape_string(shape));
      infer_at = static_cast<int>(d);
    } else if (shape[d] < 0) {
      fail("reshape", absl::StrCat("negative dimension in ", shape_string(shape)));
    } else {
      known = checked_mul("reshape", "target element count", known, shape[d]);
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || volume % known != 0)
      fail("reshape",
           absl::StrCat("cannot infer -1 in ", shape_string(shape), " for volume ", volume));
    resolved[infer_at] = volume / known;
  }
  Tensor in[] = {x};
  return g.add_node(in, ReshapeAttrs{resolved});
}

}  // namespace tessera
