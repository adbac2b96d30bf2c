// Test support: checks that an op's forward and needed rules are TIGHT, not only sound
// (DESIGN.md section 2, "Rules must be exact where the structure allows"), against a brute-force
// dependency probe with the reference kernels:
// - probe(input k, element e): the output elements that change when e alone takes other values
//   (several perturbation values, on up to `contexts` random fills of all inputs, united, so a
//   value that by chance changes nothing, as relu of a negative or a non-maximal max operand,
//   does not hide a dependency);
// - forward: for every element e of every graph input, forward(k, {e}) must contain the probe
//   (soundness, always checked) and equal it (tightness, on the inputs marked exact);
// - needed: for random output boxes B, the needed box of each input marked exact must equal the
//   bounding box of the elements whose probe meets B (each of its edges holds an element that
//   can influence B; a box cannot be tighter, e.g. for slices with steps).
// Header-only; shapes must stay small (every input element is probed).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/op_harness.h"

namespace tessera::testing {

struct TightnessSpec {
  // Bit k: the forward rule of op input k must equal the probe.
  uint32_t forward_exact = ~0u;
  // Bit k: the needed box of op input k must equal the hull of the elements influencing the box.
  uint32_t needed_exact = ~0u;
  // Non-empty for a case on the documented list of known-loose rules: tightness mismatches are
  // reported as doctest warnings (with this note) instead of failures. Unsound rules always fail.
  std::string known_loose = {};
  int output_boxes = 24;  // random output boxes for the needed check
  int contexts = 6;       // most random input fills probed per element
  // Output elements that depend on fewer inputs than the op's structure says for a reason the
  // rules do not model (causal attention's row 0 sees one key: its softmax weight is 1 whatever
  // q and k hold). The rule's forward is taken as the dependency there; soundness is still checked.
  std::function<bool(const int64_t* out_index)> degenerate_output = nullptr;
};

namespace tightness_detail {

// Perturbation values for an element currently holding x.
inline std::vector<double> perturbations(const Node& n, double x, const ValueRange& range,
                                         std::mt19937_64& rng) {
  if (n.dtype == DType::Bool) return {x != 0 ? 0.0 : 1.0};
  if (is_integer(n.dtype)) {
    const int64_t lo = static_cast<int64_t>(range.lo), hi = static_cast<int64_t>(range.hi);
    std::vector<double> v;
    if (hi - lo <= 6) {
      for (int64_t i = lo; i <= hi; ++i) v.push_back(static_cast<double>(i));
    } else {
      v = {static_cast<double>(lo), static_cast<double>(hi)};
      std::uniform_int_distribution<int64_t> u(lo, hi);
      for (int i = 0; i < 3; ++i) v.push_back(static_cast<double>(u(rng)));
    }
    std::erase(v, x);
    return v;
  }
  // Beyond the fill range on both sides (changes max/min, comparisons, floor, relu, argmax), and
  // inside it.
  const double span = std::max(range.hi - range.lo, 1.0);
  return {range.hi + 0.75 * span, range.lo - 0.75 * span, x + 0.3125 * span, x - 0.4375 * span};
}

inline int64_t linear_index(const Shape& shape, const int64_t* index) {
  int64_t o = 0;
  for (size_t d = 0; d < shape.size(); ++d) o = o * shape[d] + index[d];
  return o;
}

inline Box point_box(int rank, const int64_t* index) {
  Box b = Box::of_rank(rank);
  for (int d = 0; d < rank; ++d) b[d] = Interval(index[d], index[d] + 1);
  return b;
}

inline std::vector<char> bitmap(const Shape& shape, const Region& region) {
  std::vector<char> bits(static_cast<size_t>(shape_volume(shape)), 0);
  for (const Box& b : region.boxes())
    ref::for_each_index(
        b, [&](const int64_t* i) { bits[static_cast<size_t>(linear_index(shape, i))] = 1; });
  return bits;
}

// Bounding box (as a string) and count of the set elements of a bitmap over `shape`.
inline std::string describe(const Shape& shape, const std::vector<char>& bits) {
  Box hull = Box::of_rank(static_cast<int>(shape.size()));
  int64_t count = 0;
  ref::for_each_index(Box::full(shape), [&](const int64_t* i) {
    if (!bits[static_cast<size_t>(linear_index(shape, i))]) return;
    ++count;
    hull = hull.hull(point_box(static_cast<int>(shape.size()), i));
  });
  return std::to_string(count) + " elements in " + hull.to_string();
}

// One tightness finding: reported once per (input, check) with the first example and a count.
struct Finding {
  int count = 0;
  std::string example;
  void note(std::string text) {
    if (count++ == 0) example = std::move(text);
  }
};

inline void report(const OpCase& c, const TightnessSpec& spec, const std::string& what,
                   const Finding& f) {
  if (f.count == 0) return;
  const std::string message =
      c.label + ": " + what + " (" + std::to_string(f.count) + " cases), e.g. " + f.example;
  if (spec.known_loose.empty())
    FAIL_CHECK(message);
  else
    WARN_MESSAGE(false, message, " [known loose: ", spec.known_loose, "]");
}

}  // namespace tightness_detail

inline void check_tightness(const OpCase& c, const TightnessSpec& spec = {}, uint64_t seed = 1) {
  using namespace tightness_detail;
  Graph g;
  Tensor out_t = c.build(g);
  const Node& out = g.node(out_t.id);
  const OpDef& def = op_def(out.kind);
  std::mt19937_64 rng(seed);
  CAPTURE(c.label);
  CAPTURE(seed);
  auto range_of = [&](size_t i) { return i < c.ranges.size() ? c.ranges[i] : ValueRange{}; };
  // Random fills of all inputs, and the output each gives, made on first use.
  std::vector<std::vector<Buffer>> fills;
  std::vector<Buffer> fill_outputs;
  auto context = [&](size_t k) {
    while (fills.size() <= k) {
      std::vector<Buffer> inputs;
      for (size_t i = 0; i < g.inputs().size(); ++i) {
        const Node& n = g.node(g.inputs()[i]);
        inputs.push_back(make_buffer(n));
        fill_box(inputs.back(), n, Box::full(n.shape), range_of(i), rng);
      }
      fill_outputs.push_back(evaluate_full(g, inputs)[static_cast<size_t>(out_t.id)]);
      fills.push_back(std::move(inputs));
    }
  };
  const int64_t out_volume = out.volume();
  bool any_loose = false;
  for (size_t gi = 0; gi < g.inputs().size(); ++gi) {
    const NodeId in_id = g.inputs()[gi];
    const Node& in = g.node(in_id);
    uint32_t slots = 0;  // op inputs reading this graph input
    for (size_t k = 0; k < out.inputs.size(); ++k)
      if (out.inputs[k] == in_id) slots |= 1u << k;
    if (slots == 0 || in.volume() == 0) continue;
    REQUIRE_MESSAGE(in.volume() * out_volume <= (int64_t{1} << 22),
                    "shapes too large for the tightness probe");
    const bool forward_exact = (slots & spec.forward_exact) == slots;
    const bool needed_exact = (slots & spec.needed_exact) == slots;
    const size_t contexts = forward_exact || needed_exact ? static_cast<size_t>(spec.contexts) : 1;
    // influence[e]: bitmap of the outputs that element e of this input changed.
    std::vector<std::vector<char>> influence(static_cast<size_t>(in.volume()));
    Finding unsound, loose;
    ref::for_each_index(Box::full(in.shape), [&](const int64_t* e) {
      const Box dirt = point_box(in.rank(), e);
      Region fwd(out.rank());
      for (size_t k = 0; k < out.inputs.size(); ++k)
        if (slots & (1u << k)) def.forward(g, out, static_cast<int>(k), dirt, fwd);
      const std::vector<char> fwd_bits = bitmap(out.shape, fwd);
      std::vector<char>& probe = influence[static_cast<size_t>(linear_index(in.shape, e))];
      probe.assign(static_cast<size_t>(out_volume), 0);
      for (size_t ctx = 0; ctx < contexts && probe != fwd_bits; ++ctx) {
        if (ctx > 0 && spec.degenerate_output) {  // done when only degenerate outputs are missing
          bool missing = false;
          ref::for_each_index(Box::full(out.shape), [&](const int64_t* o) {
            const size_t i = static_cast<size_t>(linear_index(out.shape, o));
            missing = missing || (fwd_bits[i] && !probe[i] && !spec.degenerate_output(o));
          });
          if (!missing) break;
        }
        context(ctx);
        TensorView base_view = dense_view(fills[ctx][gi].data(), in.dtype, Box::full(in.shape));
        for (double v : perturbations(in, ref::load(base_view, e), range_of(gi), rng)) {
          std::vector<Buffer> perturbed = fills[ctx];
          ref::store(dense_view(perturbed[gi].data(), in.dtype, Box::full(in.shape)), e, v);
          const Buffer changed = evaluate_full(g, perturbed)[static_cast<size_t>(out_t.id)];
          ref::for_each_index(Box::full(out.shape), [&](const int64_t* o) {
            if (!same_element(fill_outputs[ctx], changed, out, o))
              probe[static_cast<size_t>(linear_index(out.shape, o))] = 1;
          });
        }
      }
      bool is_sound = true;
      for (size_t o = 0; o < probe.size(); ++o) is_sound = is_sound && !(probe[o] && !fwd_bits[o]);
      const std::string where = op_display_name(in) + " dirt " + dirt.to_string() + ": forward " +
                                fwd.to_string() + ", probe changed " + describe(out.shape, probe);
      if (spec.degenerate_output)
        ref::for_each_index(Box::full(out.shape), [&](const int64_t* o) {
          const size_t i = static_cast<size_t>(linear_index(out.shape, o));
          if (fwd_bits[i] && spec.degenerate_output(o)) probe[i] = 1;
        });
      const bool is_tight = probe == fwd_bits || !is_sound;
      if (!is_sound) unsound.note(where);
      if (!is_tight && forward_exact) loose.note(where);
    });
    if (unsound.count > 0)
      FAIL_CHECK(c.label, ": forward rule UNSOUND (", unsound.count, " dirt elements), e.g. ",
                 unsound.example);
    report(c, spec, "forward rule loose", loose);
    any_loose = any_loose || loose.count > 0;
    if (!needed_exact) continue;
    // Needed: output boxes, random and the full box.
    Finding loose_needed;
    for (int b = 0; b <= spec.output_boxes; ++b) {
      const Box want = b == spec.output_boxes ? Box::full(out.shape) : random_box(out.shape, rng);
      std::vector<Box> needed(out.inputs.size(), Box::of_rank(0));
      def.needed(g, out, want, needed);
      Box got = Box::of_rank(in.rank());
      for (size_t k = 0; k < out.inputs.size(); ++k)
        if (slots & (1u << k)) got = got.hull(needed[k]);
      const std::vector<char> want_bits = bitmap(out.shape, Region(want));
      Box hull = Box::of_rank(in.rank());
      ref::for_each_index(Box::full(in.shape), [&](const int64_t* e) {
        const std::vector<char>& probe = influence[static_cast<size_t>(linear_index(in.shape, e))];
        for (size_t o = 0; o < probe.size(); ++o)
          if (probe[o] && want_bits[o]) {
            hull = hull.hull(point_box(in.rank(), e));
            break;
          }
      });
      const bool same = (got.empty() && hull.empty()) || got == hull;
      if (!same && !got.contains(hull))
        FAIL_CHECK(c.label, ": needed rule UNSOUND for ", op_display_name(in), " and output box ",
                   want.to_string(), ": needed ", got.to_string(), ", influencing elements span ",
                   hull.to_string());
      else if (!same)
        loose_needed.note(op_display_name(in) + " output box " + want.to_string() + ": needed " +
                          got.to_string() + ", influencing elements span " + hull.to_string());
    }
    report(c, spec, "needed rule loose", loose_needed);
    any_loose = any_loose || loose_needed.count > 0;
  }
  if (!spec.known_loose.empty())
    WARN_MESSAGE(any_loose, c.label,
                 " is on the known-loose list but its rules are now tight: remove it");
}

}  // namespace tessera::testing
