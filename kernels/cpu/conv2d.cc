// Optimised f32 conv2d (semantics at the definition block in engine/ops_nn.cc): direct
// convolution vectorised along the output width, with register blocks of output channels.
// 3x3 and 5x5 convs of stride 1 with 8+ channels each way take the Winograd kernel instead
// (conv2d_winograd.cc) where AVX2 or AVX-512 is available.
//
// Per group the box touches, output row after output row, the input rows a row reads (every
// input channel of the group) are packed into scratch: zero-padded, restricted to the columns
// the box's chunk needs, and split into stride_w phases so that every tap reads contiguous floats
// whatever the stride and dilation. Packed rows sit in a ring of (kernel_h - 1) * dilation_h + 1
// slots, so consecutive output rows pack only the input rows they do not share. A 1x1 conv of
// stride 1 over contiguous input rows reads them in place instead, but for side columns that
// would read past the input view. The weights of the box's output channels are
// repacked once per call of a large box so that the weights a micro-kernel broadcasts for one
// tap are adjacent (same values, same order: the bits do not depend on it).
// A micro-kernel (conv2d_internal.h; the portable table, the epilogue and the phase scatter are
// in conv2d_common.cc) then accumulates blocks of output channels x output pixels in registers.
// Where a chunk's columns would fill their vectors poorly, consecutive output rows run as one
// row (rows mode, pack_rows_mode), and a 1x1 conv over whole rows held contiguously runs them
// as one flat row (conv2d_f32).
//
// Exactness (DESIGN.md section 1): every output element gets acc = 0, then one fused (AVX2,
// AVX-512) or unfused (portable) multiply-add per tap in the order (input channel, kh, kw), taps
// in the padding included as products with zero, then acc + bias. Boxes, tiles, chunks and
// register blocks only choose which elements are computed together, never this sequence.
//
// Scratch (the call's): the ring of packed rows of one group for one chunk of at most kChunk
// output columns, one group's repacked weights, the ring's tags, row and tap offsets and one
// block of accumulators.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <utility>

#include "engine/ops.h"
#include "kernels/cpu/conv2d_internal.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tessera::cpu {

namespace {

using conv::ConvTile;
using conv::MicroTable;
using conv::scatter_phases;

// Output columns packed at once: bounds the scratch whatever the image width.
constexpr int64_t kChunk = 256;
constexpr int64_t kRowsEntries = 128;  // rows mode: the most pixels one row of rows takes
// Output pixels (per sample and channel) from which a call repacks its weights: below, the copy
// costs more than the adjacent broadcasts save (measured: 2% faster on 200x240 images, up to 10%
// slower on 16x20 ones).
constexpr int64_t kRepackPixels = 4096;
// Every table's lanes divide this; packed rows are padded to it.
constexpr int64_t kMaxLanes = 16;

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// The conv's sizes, from the node and its inputs' full shapes.
struct Geometry {
  int64_t height = 0, width = 0;  // input
  int64_t out_height = 0, out_width = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  int64_t in_per_group = 1, out_per_group = 1;

  // Floats of one phase of a packed row for a chunk of `columns` output columns.
  int64_t phase_len(int64_t columns) const {
    return round_up(columns, kMaxLanes) + (kernel_w - 1) * dil_w / stride_w;
  }
  // An odd number of 64-byte lines, so that the rows a micro-kernel walks through spread over
  // all sets of the L1 cache instead of a few (1 KiB strides thrash it).
  int64_t row_stride(int64_t columns) const {
    const int64_t floats = round_up(stride_w * phase_len(columns), kMaxLanes);
    return floats % (2 * kMaxLanes) == 0 ? floats + kMaxLanes : floats;
  }
  int64_t ring_slots() const { return (kernel_h - 1) * dil_h + 1; }
  int64_t rows_floats() const {  // the ring of packed rows, or rows mode's one per kernel row
    return in_per_group * std::max(ring_slots() * row_stride(std::min(out_width, kChunk)),
                                   kernel_h * row_stride(kRowsEntries));
  }
  // One group's weights, repacked (pack_weights).
  int64_t weights_floats() const { return out_per_group * in_per_group * kernel_h * kernel_w; }
};

Geometry geometry_of(const Conv2dAttrs& a, const Shape& x, const Shape& weight, const Shape& out) {
  Geometry g;
  g.height = x[2];
  g.width = x[3];
  g.out_height = out[2];
  g.out_width = out[3];
  g.kernel_h = weight[2];
  g.kernel_w = weight[3];
  g.stride_h = a.stride_h;
  g.stride_w = a.stride_w;
  g.pad_h = a.pad_h;
  g.pad_w = a.pad_w;
  g.dil_h = a.dilation_h;
  g.dil_w = a.dilation_w;
  g.in_per_group = weight[1];
  g.out_per_group = weight[0] / a.groups;
  return g;
}

// Scatters input row ih of channel c (the part output columns [ow0, ow0 + columns) read: input
// columns [lo, hi) are needed and exist) into the phases at dst, phase_len floats each (layout in
// conv2d_internal.h); the entries of columns outside the image are left as they are. Reads
// only inside the input box the needed rule names.
void pack_span(const Geometry& g, const MicroTable& table, const TensorView& x, int64_t n, int64_t c, int64_t ih,
               int64_t ow0, int64_t columns, float* dst, int64_t phase_len) {
  const int64_t first = ow0 * g.stride_w - g.pad_w;  // input column of phase 0, entry 0
  const int64_t needed = (columns - 1) * g.stride_w + (g.kernel_w - 1) * g.dil_w + 1;
  const int64_t lo = std::max<int64_t>(first, 0);
  const int64_t hi = std::min<int64_t>(first + needed, g.width);
  if (ih < 0 || ih >= g.height || lo >= hi) return;
  const int64_t at[4] = {n, c, ih, lo};
  scatter_phases(x.at<const float>(at), x.strides[3], lo, hi, first, g.stride_w, dst, phase_len, table.pairs);
}

// Packs input row `ih` (possibly in the padding) of channels [c0, c0 + in_per_group) of sample
// `n` for output columns [ow0, ow0 + columns) into dst + c * channel_stride; the rest is zero.
void pack_row(const Geometry& g, const MicroTable& table, const TensorView& x, int64_t n, int64_t c0, int64_t ih,
              int64_t ow0, int64_t columns, float* dst0, int64_t channel_stride) {
  for (int64_t c = 0; c < g.in_per_group; ++c) {
    float* dst = dst0 + c * channel_stride;
    std::memset(dst, 0, sizeof(float) * static_cast<size_t>(g.row_stride(columns)));
    pack_span(g, table, x, n, c0 + c, ih, ow0, columns, dst, g.phase_len(columns));
  }
}

// Rows mode: output rows [oh, oh + rows) of a chunk run as one row of rows x seg pixels: one
// packed row per kernel row holds, from entry r * seg of each phase, the input that output row
// oh + r reads there (seg: the entries an output row's taps read), so the short rows of small
// maps fill whole vectors. The pixels between rows compute values never stored; each element's
// operations are those of one row at a time.
// The packed rows are laid out for `span` pixels (rows * seg or more): one per input channel
// and kernel row, row_stride(span) floats apart.
void pack_rows_mode(const Geometry& g, const MicroTable& table, const TensorView& x, int64_t n, int64_t c0,
                    int64_t oh, int64_t rows, int64_t seg, int64_t span, int64_t ow0, int64_t columns, float* dst0) {
  const int64_t phase_len = g.phase_len(span), row_stride = g.row_stride(span);
  for (int64_t c = 0; c < g.in_per_group; ++c)
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      float* dst = dst0 + (c * g.kernel_h + kh) * row_stride;
      std::memset(dst, 0, sizeof(float) * static_cast<size_t>(row_stride));
      for (int64_t r = 0; r < rows; ++r)
        pack_span(g, table, x, n, c0 + c, (oh + r) * g.stride_h - g.pad_h + kh * g.dil_h, ow0, columns, dst + r * seg,
                  phase_len);
    }
}

// `total` items in the fewest blocks of at most `most`, of balanced sizes (the first ones one
// larger): 10 vectors in blocks of 3 are 3, 3, 2, 2 rather than 3, 3, 3, 1, whose last block
// would be bound by its loads.
struct Split {
  int64_t count, base, larger;
  Split(int64_t total, int64_t most)
      : count((total + most - 1) / most), base(total / count), larger(total % count) {}
  int64_t size(int64_t block) const { return base + (block < larger ? 1 : 0); }
};

// Copies the weights of output channels [o_begin, o_end) (of one group) into `packed`, cut into
// the channel blocks compute_chunk uses, each block laid out [c][kh][kw][channel of the block]:
// the broadcasts of one tap are then adjacent instead of a whole filter apart.
void pack_weights(const Geometry& g, const MicroTable& table, const TensorView& weight, int64_t o_begin,
                  int64_t o_end, float* packed) {
  const Split channel_blocks(o_end - o_begin, table.max_channels);
  const int64_t taps = g.kernel_h * g.kernel_w;
  for (int64_t cb = 0, o0 = o_begin; cb < channel_blocks.count; o0 += channel_blocks.size(cb++)) {
    const int64_t ocb = channel_blocks.size(cb);
    float* block = packed + (o0 - o_begin) * g.in_per_group * taps;
    const int64_t ws_c = weight.strides[1], ws_h = weight.strides[2], ws_w = weight.strides[3];
    for (int64_t j = 0; j < ocb; ++j) {
      const int64_t at[4] = {o0 + j, 0, 0, 0};
      const float* filter = weight.at<const float>(at);
      float* dst = block + j;
      for (int64_t c = 0; c < g.in_per_group; ++c)
        for (int64_t kh = 0; kh < g.kernel_h; ++kh)
          for (int64_t kw = 0; kw < g.kernel_w; ++kw, dst += ocb) *dst = filter[c * ws_c + kh * ws_h + kw * ws_w];
    }
  }
}

// The box's output columns [ow0, ow0 + columns) of output row (n, oh), channels [o_begin, o_end)
// of one group, from rows packed for that chunk and the weights (packed by pack_weights, or
// where they are when `packed_weights` is nullptr). Blocks go
// straight to the output when its rows are contiguous, through `acc` otherwise. A block of
// channels keeps its weights in L1 while it sweeps the row's pixel blocks (sweeping channel
// blocks per pixel block instead measured slower, 1x1 convs included).
// What the direct kernel computes: the call's box and views, or a 1x1 conv's rows flattened
// into one (flat_rows, in conv2d_f32).
struct DirectCall {
  const Conv2dAttrs& attrs;
  std::span<const KernelInput> inputs;
  const TensorView& out;
  const Box& box;
};

// Output rows [oh, oh + rows) (more than one: rows mode, seg pixels apart) of columns
// [ow0, ow0 + columns), channels [o_begin, o_end).
void compute_chunk(const DirectCall& args, const MicroTable& table, ConvTile& tile, int64_t n,
                   int64_t oh, int64_t rows, int64_t seg, int64_t o_begin, int64_t o_end, int64_t ow0, int64_t columns,
                   const float* packed_weights, float* acc) {
  const Conv2dAttrs& attrs = args.attrs;
  const TensorView* bias = attrs.has_bias(args.inputs.size()) ? &args.inputs[2] : nullptr;
  const conv::Epilogue epilogue(attrs, args.inputs, table.finish);
  // Without a residual, relu is the micro-kernel's last step; with one, it follows the add.
  tile.relu = attrs.relu && epilogue.residual == nullptr;
  const int64_t lanes = table.lanes;
  const conv::Taps taps = conv::taps_of(tile.kernel_w);
  const int64_t out_step = args.out.strides[3], out_channel_step = args.out.strides[1];
  const int64_t filter = tile.kernel_h * tile.kernel_w;
  tile.bias_stride = bias != nullptr ? bias->strides[0] : 0;
  if (rows == 1) seg = columns;  // rows mode's last group may be one row: no pixels between rows
  const int64_t span = rows * seg;  // pixels
  const int64_t vectors = (span + lanes - 1) / lanes;
  const Split channel_blocks(o_end - o_begin, table.max_channels);
  const Split pixel_blocks(vectors, table.max_vectors);
  auto block = [&](int64_t cb, int64_t o0, int64_t pb, int64_t v0) {
    const int ocb = static_cast<int>(channel_blocks.size(cb));
    if (packed_weights != nullptr) {
      tile.weight = packed_weights + (o0 - o_begin) * tile.channels * filter;
      tile.weight_strides[0] = 1;
      tile.weight_strides[1] = filter * ocb;
      tile.weight_strides[2] = tile.kernel_w * ocb;
      tile.weight_strides[3] = ocb;
    } else {
      const TensorView& weight = args.inputs[1];
      const int64_t at[4] = {o0, 0, 0, 0};
      tile.weight = weight.at<const float>(at);
      for (int d = 0; d < 4; ++d) tile.weight_strides[d] = weight.strides[static_cast<size_t>(d)];
    }
    tile.bias = bias != nullptr ? bias->at<const float>(&o0) : nullptr;
    const int wv = static_cast<int>(pixel_blocks.size(pb));
    const int64_t q0 = v0 * lanes, count = std::min(wv * lanes, span - q0);
    if (rows == 1 && out_step == 1) {
      const int64_t at[4] = {n, o0, oh, ow0 + q0};
      float* out = args.out.at<float>(at);
      table.at(taps, ocb, wv)(tile, q0, count, out, out_channel_step);
      if (epilogue.residual != nullptr)  // in place, while the block is in L1
        for (int j = 0; j < ocb; ++j)
          epilogue.finish(out + j * out_channel_step, count, out + j * out_channel_step, 1, n, o0 + j, oh, ow0 + q0);
      return;
    }
    table.at(taps, ocb, wv)(tile, q0, count, acc, conv::kMaxBlockPixels);
    // Pixels [q0, q0 + count) hold columns [e0, e1) of rows r = q / seg.
    for (int64_t r = q0 / seg; r * seg < q0 + count; ++r) {
      const int64_t e0 = std::max(q0 - r * seg, int64_t{0}), e1 = std::min(q0 + count - r * seg, columns);
      if (e0 >= e1) continue;
      const int64_t at[4] = {n, o0, oh + r, ow0 + e0};
      float* out = args.out.at<float>(at);
      for (int j = 0; j < ocb; ++j) {
        const float* src = acc + j * conv::kMaxBlockPixels + r * seg + e0 - q0;
        if (epilogue.residual != nullptr) {
          epilogue.finish(src, e1 - e0, out + j * out_channel_step, out_step, n, o0 + j, oh + r, ow0 + e0);
          continue;
        }
        for (int64_t i = 0; i < e1 - e0; ++i) out[j * out_channel_step + i * out_step] = src[i];
      }
    }
  };
  for (int64_t r = 0; r < rows; ++r) epilogue.prefetch(n, o_begin, o_end, oh + r, ow0, ow0 + columns);
  for (int64_t cb = 0, o0 = o_begin; cb < channel_blocks.count; o0 += channel_blocks.size(cb++))
    for (int64_t pb = 0, v0 = 0; pb < pixel_blocks.count; v0 += pixel_blocks.size(pb++))
      block(cb, o0, pb, v0);
}

// Output columns [begin, end) of a box, read in place (`direct`) or packed.
struct ColumnSegment {
  int64_t begin = 0, end = 0;
  bool direct = false;
};

// Cuts the box's columns into segments: for a 1x1 conv of stride 1 over contiguous input rows, a
// middle of whole register blocks whose taps all read existing columns inside x's view (read in
// place on the rows whose taps read existing rows), packed sides, which start with whole register
// blocks too so that the row is blocked as one packed segment would be; otherwise one packed
// segment. Returns the segment count (at most 3). The code reads larger kernels in place as well,
// but measured slower for them: 3x3 and 5x5 convs of 200x240 images lost 5-10% (the packed ring
// reuses each input row for kernel_h output rows from L1/L2 at conflict-free strides).
int column_segments(const Geometry& g, const TensorView& x, const Box& box, const MicroTable& table,
                    ColumnSegment* segments) {
  const int64_t ow_begin = box.begin(3), ow_end = box.end(3);
  int count = 0;
  if (g.kernel_h == 1 && g.kernel_w == 1 && g.stride_w == 1 && x.strides[3] == 1) {
    const int64_t block = table.lanes * table.max_vectors;
    const int64_t in_lo = std::max<int64_t>(0, x.extent.begin(3));
    const int64_t in_hi = std::min(g.width, x.extent.end(3));
    // Output column ow reads input columns [ow - pad_w, ow - pad_w + (kernel_w - 1) dil_w].
    const int64_t lo = in_lo + g.pad_w, hi = in_hi + g.pad_w - (g.kernel_w - 1) * g.dil_w;
    const int64_t a = lo > ow_begin ? ow_begin + round_up(lo - ow_begin, block) : ow_begin;
    const int64_t b = a + std::max<int64_t>(std::min(hi, ow_end) - a, 0) / block * block;
    if (b > a) {
      if (a > ow_begin) segments[count++] = {ow_begin, a, false};
      segments[count++] = {a, b, true};
      if (b < ow_end) segments[count++] = {b, ow_end, false};
      return count;
    }
  }
  segments[count++] = {ow_begin, ow_end, false};
  return count;
}

// A 1x1 conv of stride 1 without padding reads only its own pixel: a box of whole rows that
// the input, output and residual views each hold one after another is one row of
// rows x width pixels (the geometry's flat_rows()), so the short rows of small maps fill whole
// vectors and take one micro-kernel call per block instead of one per row. Every element's
// operations are unchanged.
bool flattens(const Geometry& g) {
  return g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}
Geometry flat_rows(Geometry g) {
  g.width = g.out_width = g.height * g.width;
  g.height = g.out_height = 1;
  return g;
}

// `view` holds columns [0, width) of its rows, each row right after the previous one.
bool whole_rows(const TensorView& view, int64_t width) {
  return view.strides[3] == 1 && view.extent.begin(3) == 0 && view.extent.end(3) == width &&
         view.strides[2] == width;
}

// The view as rows [0, 1) of one flat row: element (n, c, h, w) at column h * width + w.
template <class View>
View flat_view(View view, int64_t width) {
  const int64_t begin = view.extent.begin(2) * width, end = view.extent.end(2) * width;
  view.extent[2] = Interval(0, 1);
  view.extent[3] = Interval(begin, end);
  view.strides[2] = end - begin;
  return view;
}

template <const MicroTable& (*kTable)()>
absl::Status run_direct(const DirectCall& args, const Geometry& g, std::span<std::byte> scratch);

// Whether a conv runs as the 1x1 gemm (conv::pointwise_gemm): one group, a table with the gemm.
bool takes_pointwise(const Conv2dAttrs& a, const Geometry& g, const conv::MicroTable& table) {
  return flattens(g) && a.groups == 1 && table.gemm[0] != nullptr;
}

template <const MicroTable& (*kTable)()>
absl::Status conv2d_f32(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const Conv2dAttrs& a = args.node.attrs_as<Conv2dAttrs>();
  const Geometry g = geometry_of(a, args.inputs[0].shape, args.inputs[1].shape, args.node.shape);
  const int residual = a.residual_input(args.inputs.size());
  const bool flat = flattens(g) && box.extent(2) > 1 && box.begin(3) == 0 && box.end(3) == g.out_width &&
              whole_rows(args.inputs[0], g.width) && whole_rows(args.out, g.out_width) &&
              (residual < 0 || whole_rows(args.inputs[static_cast<size_t>(residual)], g.out_width));
  const bool pointwise = takes_pointwise(a, g, kTable());
  const auto* prepared = static_cast<const float*>(args.node.prepared);
  if (!flat) {
    if (pointwise)  // a 1x1 conv over partial rows
      return conv::pointwise_gemm(a, args.inputs, args.out, box, kTable(), prepared, args.scratch);
    return run_direct<kTable>(DirectCall{a, args.inputs, args.out, box}, g, args.scratch);
  }
  std::array<KernelInput, 4> inputs;
  if (args.inputs.size() > inputs.size()) return absl::InternalError("[conv2d] too many inputs");
  for (size_t i = 0; i < args.inputs.size(); ++i) inputs[i] = args.inputs[i];
  inputs[0] = flat_view(inputs[0], g.width);
  if (residual >= 0) inputs[static_cast<size_t>(residual)] = flat_view(inputs[static_cast<size_t>(residual)], g.out_width);
  const TensorView out = flat_view(args.out, g.out_width);
  Box flat_box = box;
  flat_box[2] = Interval(0, 1);
  flat_box[3] = Interval(box.begin(2) * g.out_width, box.end(2) * g.out_width);
  if (pointwise)
    return conv::pointwise_gemm(a, std::span<const KernelInput>(inputs.data(), args.inputs.size()), out, flat_box, kTable(),
                                prepared, args.scratch);
  return run_direct<kTable>(DirectCall{a, std::span<const KernelInput>(inputs.data(), args.inputs.size()), out, flat_box},
                            flat_rows(g), args.scratch);
}

template <const MicroTable& (*kTable)()>
absl::Status run_direct(const DirectCall& args, const Geometry& g, std::span<std::byte> scratch) {
  const Box& box = args.box;
  const MicroTable& table = kTable();
  const TensorView& x = args.inputs[0];
  ScratchCarver carver(scratch);
  float* rows = carver.take<float>(g.rows_floats());
  float* packed_weights = carver.take<float>(g.weights_floats());
  const int64_t slots = g.ring_slots();
  int64_t* slot_row = carver.take<int64_t>(slots);  // the input row each ring slot holds
  int64_t* row_offset = carver.take<int64_t>(3 * g.kernel_h);  // packed, in place, rows mode
  int64_t* tap_offset = carver.take<int64_t>(3 * g.kernel_w);
  float* acc = carver.take<float>(conv::kMaxBlockChannels * conv::kMaxBlockPixels);
  if (rows == nullptr || packed_weights == nullptr || slot_row == nullptr || row_offset == nullptr ||
      tap_offset == nullptr || acc == nullptr)
    return absl::InternalError("[conv2d] kernel scratch too small");
  ConvTile tile;  // reads packed rows
  tile.rows = rows;
  tile.channels = g.in_per_group;
  tile.kernel_h = g.kernel_h;
  tile.kernel_w = g.kernel_w;
  tile.row_offset = row_offset;
  tile.tap_offset = tap_offset;
  ConvTile direct = tile;  // reads x's rows in place (stride_w 1)
  direct.channel_stride = x.strides[1];
  direct.row_offset = row_offset + g.kernel_h;
  direct.tap_offset = tap_offset + g.kernel_w;
  for (int64_t kh = 0; kh < g.kernel_h; ++kh) row_offset[g.kernel_h + kh] = kh * g.dil_h * x.strides[2];
  for (int64_t kw = 0; kw < g.kernel_w; ++kw) tap_offset[g.kernel_w + kw] = kw * g.dil_w;
  ConvTile multi = tile;  // rows mode (pack_rows_mode)
  multi.row_offset = row_offset + 2 * g.kernel_h;
  multi.tap_offset = tap_offset + 2 * g.kernel_w;
  const int64_t lanes = table.lanes;
  // The share of the lanes of `span` pixels' vectors that hold one of `pixels`.
  auto fill = [&](int64_t pixels, int64_t span) {
    return static_cast<double>(pixels) / static_cast<double>((span + lanes - 1) / lanes * lanes);
  };
  // Input rows [row_lo, row_hi) exist and lie in x's view.
  const int64_t row_lo = std::max<int64_t>(0, x.extent.begin(2)), row_hi = std::min(g.height, x.extent.end(2));
  int64_t packed_begin = -1, packed_end = -1;  // output channels packed_weights holds
  const bool repack = box.extent(2) * box.extent(3) >= kRepackPixels;
  ColumnSegment segments[3];
  const int segment_count = column_segments(g, x, box, table, segments);
  for (int s = 0; s < segment_count; ++s) {
    for (int64_t ow0 = segments[s].begin; ow0 < segments[s].end; ow0 += kChunk) {
      const int64_t columns = std::min(kChunk, segments[s].end - ow0);
      const int64_t phase_len = g.phase_len(columns), row_stride = g.row_stride(columns);
      tile.channel_stride = slots * row_stride;
      for (int64_t kw = 0; kw < g.kernel_w; ++kw)
        tap_offset[kw] = (kw * g.dil_w % g.stride_w) * phase_len + kw * g.dil_w / g.stride_w;
      // Rows mode where one row's vectors are much less filled than those of several rows.
      const int64_t seg = columns + (g.kernel_w - 1) * g.dil_w / g.stride_w;
      const int64_t rows_per = segments[s].direct ? 1 : std::min(box.extent(2), kRowsEntries / seg);
      const bool rows_mode = rows_per > 1 && fill(rows_per * columns, rows_per * seg) > 1.1 * fill(columns, columns);
      if (rows_mode) {
        const int64_t span = rows_per * seg, multi_phase = g.phase_len(span), multi_stride = g.row_stride(span);
        multi.channel_stride = g.kernel_h * multi_stride;
        for (int64_t kh = 0; kh < g.kernel_h; ++kh) row_offset[2 * g.kernel_h + kh] = kh * multi_stride;
        for (int64_t kw = 0; kw < g.kernel_w; ++kw)
          tap_offset[2 * g.kernel_w + kw] = (kw * g.dil_w % g.stride_w) * multi_phase + kw * g.dil_w / g.stride_w;
      }
      for (int64_t n = box.begin(0); n < box.end(0); ++n) {
        for (int64_t o = box.begin(1); o < box.end(1);) {
          const int64_t group = o / g.out_per_group;
          const int64_t o_end = std::min(box.end(1), (group + 1) * g.out_per_group);
          if (repack && (o != packed_begin || o_end != packed_end)) {
            pack_weights(g, table, args.inputs[1], o, o_end, packed_weights);
            packed_begin = o;
            packed_end = o_end;
          }
          if (rows_mode) {
            for (int64_t oh = box.begin(2); oh < box.end(2); oh += rows_per) {
              const int64_t rows_now = std::min(rows_per, box.end(2) - oh);
              pack_rows_mode(g, table, x, n, group * g.in_per_group, oh, rows_now, seg, rows_per * seg, ow0, columns,
                             rows);
              compute_chunk(args, table, multi, n, oh, rows_now, seg, o, o_end, ow0, columns,
                            repack ? packed_weights : nullptr, acc);
            }
            o = o_end;
            continue;
          }
          std::fill(slot_row, slot_row + slots, std::numeric_limits<int64_t>::min());
          for (int64_t oh = box.begin(2); oh < box.end(2); ++oh) {
            const int64_t ih0 = oh * g.stride_h - g.pad_h;  // input row of tap kh = 0
            if (segments[s].direct && ih0 >= row_lo && ih0 + (g.kernel_h - 1) * g.dil_h < row_hi) {
              const int64_t at[4] = {n, group * g.in_per_group, ih0, ow0 - g.pad_w};
              direct.rows = x.at<const float>(at);
              compute_chunk(args, table, direct, n, oh, 1, columns, o, o_end, ow0, columns,
                            repack ? packed_weights : nullptr, acc);
              continue;
            }
            for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
              // Input rows are >= -pad_h, so the slot index is never negative.
              const int64_t ih = ih0 + kh * g.dil_h;
              const int64_t slot = (ih + g.pad_h) % slots;
              row_offset[kh] = slot * row_stride;
              if (slot_row[slot] == ih) continue;
              pack_row(g, table, x, n, group * g.in_per_group, ih, ow0, columns, rows + slot * row_stride,
                       tile.channel_stride);
              slot_row[slot] = ih;
            }
            compute_chunk(args, table, tile, n, oh, 1, columns, o, o_end, ow0, columns, repack ? packed_weights : nullptr,
                          acc);
          }
          o = o_end;
        }
      }
    }
  }
  return absl::OkStatus();
}

// The micro table of a direct kernel of this file (nullptr for any other kernel).
const conv::MicroTable* direct_table(KernelFn kernel) {
#if defined(__x86_64__)
  if (kernel == conv2d_f32<conv::avx512_micro_table>) return &conv::avx512_micro_table();
  if (kernel == conv2d_f32<conv::avx2_micro_table>) return &conv::avx2_micro_table();
#endif
  (void)kernel;
  return nullptr;
}

// The gemm table of a 1x1 conv whose constant weight the direct kernel's pointwise gemm reads
// prepared (nullptr otherwise).
const conv::MicroTable* pointwise_table(const Graph& graph, const Node& node, KernelFn kernel) {
  const conv::MicroTable* table = direct_table(kernel);
  const Node& w = graph.node(node.inputs[1]);
  if (table == nullptr || w.kind != OpKind::Constant || w.dtype != DType::F32) return nullptr;
  const Conv2dAttrs& a = node.attrs_as<Conv2dAttrs>();
  return takes_pointwise(a, geometry_of(a, graph.node(node.inputs[0]).shape, w.shape, node.shape), *table) ? table
                                                                                                           : nullptr;
}

int64_t pointwise_floats(const Graph& graph, const Node& node, const conv::MicroTable& table) {
  const int64_t channels = graph.node(node.inputs[1]).shape[1], out_channels = node.shape[1];
  return (out_channels + table.gemm_ocb - 1) / table.gemm_ocb * table.gemm_ocb * channels;
}

}  // namespace

int64_t conv2d_prepared_bytes(const Graph& graph, const Node& node, KernelFn kernel) {
  if (const conv::MicroTable* table = pointwise_table(graph, node, kernel))
    return pointwise_floats(graph, node, *table) * static_cast<int64_t>(sizeof(float));
  return conv::winograd_prepared_bytes(graph, node, kernel);
}

std::shared_ptr<const void> conv2d_prepare(const Graph& graph, const Node& node, KernelFn kernel) {
  const conv::MicroTable* table = pointwise_table(graph, node, kernel);
  if (table == nullptr) return conv::winograd_prepare(graph, node, kernel);
  const Node& w = graph.node(node.inputs[1]);
  const auto* data = static_cast<const float*>(graph.constant_data(w.constant).data);
  if (data == nullptr) return nullptr;
  std::shared_ptr<float[]> u(new (std::nothrow) float[static_cast<size_t>(pointwise_floats(graph, node, *table))]);
  if (u == nullptr) return nullptr;  // the kernel transposes the weights itself
  const int64_t channels = w.shape[1];
  conv::pointwise_weights(data, channels, 1, channels, node.shape[1], table->gemm_ocb, u.get());
  return u;
}

KernelFn conv2d_kernel(const Graph& graph, const Node& node, Isa isa) {
  if (node.dtype != DType::F32) return nullptr;
  for (NodeId in : node.inputs)
    if (graph.node(in).dtype != DType::F32) return nullptr;
  if (KernelFn winograd = conv::winograd_kernel(graph, node, isa)) return winograd;
#if defined(__x86_64__)
  if (isa >= Isa::Avx512) return conv2d_f32<conv::avx512_micro_table>;
  if (isa == Isa::Avx2) return conv2d_f32<conv::avx2_micro_table>;
#endif
  (void)isa;
  return conv2d_f32<conv::portable_micro_table>;
}

int64_t conv2d_scratch_bytes(const Graph& graph, const Node& node, bool) {
  Geometry g = geometry_of(node.attrs_as<Conv2dAttrs>(), graph.node(node.inputs[0]).shape,
                           graph.node(node.inputs[1]).shape, node.shape);
  if (flattens(g)) g = flat_rows(g);  // the wider of the two (rows are read in chunks of kChunk)
  const int64_t direct = scratch_take_bytes<float>(g.rows_floats()) + scratch_take_bytes<float>(g.weights_floats()) +
                         scratch_take_bytes<int64_t>(g.ring_slots()) + scratch_take_bytes<int64_t>(3 * g.kernel_h) +
                         scratch_take_bytes<int64_t>(3 * g.kernel_w) +
                         scratch_take_bytes<float>(conv::kMaxBlockChannels * conv::kMaxBlockPixels);
  const int64_t pointwise =
      flattens(g) ? conv::pointwise_scratch_bytes(graph.node(node.inputs[1]).shape[1], node.shape[1]) : 0;
  return std::max({direct, pointwise, conv::winograd_scratch_bytes(graph, node)});  // whichever path the ISA takes
}

}  // namespace tessera::cpu
