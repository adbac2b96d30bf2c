// Winograd F(2x2, 3x3), F(4x4, 3x3) and F(2x2, 5x5) f32 conv2d for 3x3 and 5x5 convs of stride
// 1 and dilation 1, one group, at least kMinChannels input and output channels (any padding): 16
// products per 2x2 output tile and channel pair instead of 36 (3x3), 36 per 4x4 tile instead of
// 144 (3x3, a conv of Conv2dAttrs::tile 4), 36 per 2x2 tile instead of 100 (5x5). The TAEF2 and
// RDN nets' 64->64 layers run 1.5-1.8x faster than the direct kernel (conv2d.cc) with 2x2 tiles,
// and 1.2-1.4x faster again with 4x4 tiles.
//
// Tiles sit at multiples of their size of the whole output (never relative to the box). Per
// tile: V = B^T d B of its (m+r-1)x(m+r-1) input patch per input channel, M[xi] = sum over c of
// U[xi][c] V[xi][c] per output channel (U = G g G^T of the weights, computed once in double and
// rounded), then Y = A^T M A + bias. With 2x2 tiles (Lavin's F(2, 3); F(2, 5) on the points
// 0, 1, -1, 2, -2 and infinity) every step is structurally local: V[i][j] for i, j < r reads
// only d[0..r-1][0..r-1], M's entries follow their V's, and Y[0][0] reads only M[0..r-1][0..r-1]
// (Y[1][1] only index 1..r, the two others likewise), so an output element's bits depend only
// on its own receptive field and on its fixed position in its tile. Exactness (DESIGN.md
// section 1) and the conv2d region rules therefore hold unchanged: a box cutting through a tile
// computes the whole tile with zeros in place of the inputs outside the input view (they reach
// only the tile's outputs outside the box, which are not stored), and gets the full box's bits.
// F(4, 3) (the points of F(2, 5)) mixes the whole 6x6 window into every output of its tile, so
// its outputs' bits depend on that whole window: conv2d's rules align rows and columns to the
// 4x4 tiles for these convs (conv2d_output_tile), a box's input view then holds every tile's
// window, and the zeros stand only for padding, as in the full computation.
//
// Summation order per output element: M's channel sum is acc = 0, then one FMA per input
// channel in increasing order; the transforms run in a fixed order (conv2d_winograd.inc).
//
// Work goes per tile row and chunk of kTiles tiles (along the lanes): the chunk's m + r - 1
// input rows are packed (zero-padded, their columns split into m phases: column j of tile t is
// entry t + j / m of phase j % m) and transformed kChannelGroup input channels at a time, then
// blocks of output channels run the channel sums and the output transform.
// (Packing each tile row's rows anew measured faster than keeping the rows two tile rows share
// and walking a chunk down the image: that order reads the input in short strided runs.)
// Scratch (the call's): U unless prepared, a channel group's packed rows, V, M and m output rows
// per channel of a block.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "engine/op_def.h"
#include "engine/ops.h"
#include "kernels/cpu/conv2d_internal.h"
#include "kernels/cpu/conv2d_winograd.h"
#include "kernels/cpu/simd_avx2.h"

namespace tessera::cpu::conv {

namespace {

constexpr int64_t kTiles = 48;                // tiles per chunk: three AVX-512 vectors, six AVX2
constexpr int64_t kEntries = 64;              // packed entries per chunk (its tiles and the gaps between segments)
constexpr int64_t kPhaseLen = kEntries + 16;  // entries 0 .. kEntries of a phase, padded
constexpr int64_t kMinChannels = 8;
constexpr int64_t kMaxUFloats = 1 << 21;  // bounds U's scratch (8 MiB)
constexpr int64_t kMaxOcb = 8;            // output channels per block, any instruction set
constexpr int64_t kChannelGroup = 4;      // input channels packed and transformed together

// The conv's sizes (stride 1, dilation 1, one group, an r x r kernel, r = 3 or 5).
struct Geometry {
  int64_t channels = 0, out_channels = 0;
  int64_t height = 0, width = 0, out_height = 0, out_width = 0;
  int64_t pad_h = 0, pad_w = 0;
  int64_t r = 3;
  int64_t m = 2;                                               // a tile's output rows and columns
  int64_t n() const { return m + r - 1; }                      // a tile's input rows and columns
  int64_t xis() const { return n() * n(); }                    // products per tile and channel pair
  // U in blocks of `ocb` output channels (the last one padded with zeros): block b holds
  // U[xi][c][o] for o in [b * ocb, (b + 1) * ocb) at ((b * xis + xi) * channels + c) * ocb + o %
  // ocb, so the gemm of one block and xi reads channels * ocb consecutive floats and a chunk
  // streams U from start to end (a layout by channel read a line per input channel, cold for the
  // first chunk of an edit's small box: ~100 us of a 250 us conv).
  int64_t u_block(int64_t ocb) const { return xis() * channels * ocb; }
  int64_t u_floats() const { return xis() * channels * (out_channels + kMaxOcb); }  // any ocb
  int64_t rows_floats() const { return n() * std::min(channels, kChannelGroup) * m * kPhaseLen; }
  int64_t v_floats() const { return xis() * channels * kTiles; }
  int64_t m_floats() const { return xis() * kMaxOcb * kTiles; }
};

Geometry geometry_of(const Shape& x, const Shape& w, const Shape& out, const Conv2dAttrs& a) {
  return Geometry{x[1], out[1], x[2], x[3], out[2], out[3], a.pad_h, a.pad_w, w[2]};
}
Geometry geometry_of(const Graph& graph, const Node& node) {
  Geometry g = geometry_of(graph.node(node.inputs[0]).shape, graph.node(node.inputs[1]).shape, node.shape,
                           node.attrs_as<Conv2dAttrs>());
  if (conv2d_output_tile(graph, node) == 4) g.m = 4;
  return g;
}

bool eligible(const Graph& graph, const Node& node) {
  if (node.kind != OpKind::Conv2d || node.dtype != DType::F32) return false;
  for (NodeId in : node.inputs)
    if (graph.node(in).dtype != DType::F32) return false;
  const Conv2dAttrs& a = node.attrs_as<Conv2dAttrs>();
  const Shape& w = graph.node(node.inputs[1]).shape;
  return a.stride_h == 1 && a.stride_w == 1 && a.dilation_h == 1 && a.dilation_w == 1 &&
         a.groups == 1 && (w[2] == 3 || w[2] == 5) && w[3] == w[2] && w[0] >= kMinChannels &&
         w[1] >= kMinChannels && geometry_of(graph, node).u_floats() <= kMaxUFloats;
}

// G of F(m, r) (rows: the points of apply_bt in conv2d_winograd.inc), m + r - 1 rows of r.
const double* g_matrix(int64_t m, int64_t r) {
  static const double g43[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                   {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  if (m == 4) return &g43[0][0];
  static const double g3[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  static const double g5[6][5] = {{1.0 / 4, 0, 0, 0, 0},
                                  {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
                                  {-1.0 / 6, 1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6},
                                  {1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 3, 2.0 / 3},
                                  {1.0 / 24, -1.0 / 12, 1.0 / 6, -1.0 / 3, 2.0 / 3},
                                  {0, 0, 0, 0, 1}};
  return r == 3 ? &g3[0][0] : &g5[0][0];
}

// U[xi][c][o] = (G f G^T)[xi / n][xi % n] of filter (o, c) (computed in double, rounded once),
// in blocks of `ocb` output channels (Geometry::u_block), for output channels [o_begin, o_end)
// (w's view may hold only those); every other float of the blocks holding them is zero.
void transform_weights(const Geometry& g, int64_t ocb, const TensorView& w, int64_t o_begin, int64_t o_end,
                       float* u) {
  std::fill(u, u + g.u_floats(), 0.0f);
  const int64_t r = g.r, n = g.n();
  const double* gm = g_matrix(g.m, r);
  for (int64_t o = o_begin; o < o_end; ++o)
    for (int64_t c = 0; c < g.channels; ++c) {
      double f[5][5], t[6][5];
      for (int64_t kh = 0; kh < r; ++kh)
        for (int64_t kw = 0; kw < r; ++kw) {
          const int64_t at[4] = {o, c, kh, kw};
          f[kh][kw] = *w.at<const float>(at);
        }
      for (int64_t i = 0; i < n; ++i)  // t = G f
        for (int64_t b = 0; b < r; ++b) {
          double sum = 0;
          for (int64_t a = 0; a < r; ++a) sum += gm[i * r + a] * f[a][b];
          t[i][b] = sum;
        }
      for (int64_t i = 0; i < n; ++i)  // U = t G^T
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t b = 0; b < r; ++b) sum += t[i][b] * gm[j * r + b];
          u[(o / ocb) * g.u_block(ocb) + ((n * i + j) * g.channels + c) * ocb + o % ocb] = static_cast<float>(sum);
        }
    }
}

// Packs input rows m ty - pad_h + r (r < n) of every channel of sample n for tiles
// [tx0, tx0 + tiles) into rows + (r * channels + c) * m * kPhaseLen + offset: phase p, entry e
// holds input column m (tx0 + e) - pad_w + p, or zero where that lies outside the image or x's
// view, for the entries the input transform of these tiles reads (footprint()).
constexpr int64_t extra_entries(int64_t m, int64_t r) { return (m + r - 2) / m; }
int64_t footprint(int64_t m, int64_t r, int64_t tiles) { return tiles + extra_entries(m, r); }

// Span columns [k_lo, k_hi) of one input row (src: column k_lo, `step` floats apart) into the 4
// phases of a packed row: column k is entry k / 4 of phase k % 4.
void scatter_quads(const WinogradOps& ops, const float* src, int64_t step, int64_t k_lo, int64_t k_hi, float* row) {
  int64_t k = k_lo;
  if (step == 1) {
    for (; k < k_hi && k % 4 != 0; ++k) row[(k % 4) * kPhaseLen + k / 4] = src[k - k_lo];
    const int64_t quads = (k_hi - k) / 4, e = k / 4;
    ops.deinterleave4(src + (k - k_lo), quads, row + e, row + kPhaseLen + e, row + 2 * kPhaseLen + e,
                      row + 3 * kPhaseLen + e);
    k += 4 * quads;
  }
  for (; k < k_hi; ++k) row[(k % 4) * kPhaseLen + k / 4] = src[(k - k_lo) * step];
}

void pack_rows(const WinogradOps& ops, const Geometry& g, const KernelInput& x, int64_t n, int64_t c_begin,
               int64_t c_end, int64_t ty, int64_t tx0, int64_t tiles, int64_t offset, float* rows) {
  const int64_t channels = c_end - c_begin;
  const int64_t row_lo = std::max<int64_t>(0, x.extent.begin(2)),
                row_hi = std::min(g.height, x.extent.end(2));
  const int64_t tile = g.m;
  const int64_t first = tile * tx0 - g.pad_w;  // the column of phase 0, entry 0: span column k is first + k
  // Span columns [k_lo, k_hi) exist and lie in x's view.
  const int64_t k_lo = std::max<int64_t>({0, -first, x.extent.begin(3) - first});
  const int64_t k_hi =
      std::min<int64_t>({tile * tiles + g.r - 1, g.width - first, x.extent.end(3) - first});
  const int64_t step = x.strides[3];
  const int64_t span = tile * footprint(g.m, g.r, tiles);  // span columns [0, span): entries [0, footprint)
  rows += offset;
  const int64_t ih0 = tile * ty - g.pad_h;  // the segment's first input row
  if (tile == 2 && step == 1 && span <= 4 * ops.lanes) {
    const int64_t r_lo = std::clamp<int64_t>(row_lo - ih0, 0, g.n()),
                  r_hi = k_lo < k_hi ? std::clamp<int64_t>(row_hi - ih0, r_lo, g.n()) : r_lo;
    const float* src = nullptr;
    if (r_lo < r_hi) {
      const int64_t at[4] = {n, c_begin, ih0 + r_lo, first + k_lo};
      src = x.at<const float>(at);
    }
    ops.pack_narrow(src, x.strides[1], x.strides[2], channels, g.n(), r_lo, r_hi, k_lo, k_hi, span, rows, kPhaseLen);
    return;
  }
  if (tile == 2 && k_lo == 0 && k_hi == span && step == 1 && ih0 >= row_lo && ih0 + g.n() <= row_hi) {
    const int64_t at[4] = {n, c_begin, ih0, first};
    ops.pack_pairs(x.at<const float>(at), x.strides[1], x.strides[2], channels, g.n(), span / 2, rows, kPhaseLen);
    return;
  }
  // Zeros where no input column is copied: span columns [0, k_lo) and [k_hi, span), or all of
  // a row outside the image or the view.
  auto zero = [&](float* row, int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) row[(k % tile) * kPhaseLen + k / tile] = 0.0f;
  };
  // A channel's n rows at a time: they lie one input row apart, one stream for the prefetcher
  // (rows outer, channels inner measured 3-6% slower on a 64-channel 3x3 layer).
  for (int64_t c = c_begin; c < c_end; ++c) {
    for (int64_t r = 0; r < g.n(); ++r) {
      float* row = rows + (r * channels + c - c_begin) * tile * kPhaseLen;
      const int64_t ih = ih0 + r;
      if (ih < row_lo || ih >= row_hi || k_lo >= k_hi) {
        for (int64_t phase = 0; phase < tile; ++phase)
          std::fill_n(row + phase * kPhaseLen, footprint(g.m, g.r, tiles), 0.0f);
        continue;
      }
      zero(row, 0, k_lo);
      zero(row, k_hi, span);
      const int64_t at[4] = {n, c, ih, first + k_lo};
      if (tile == 4)
        scatter_quads(ops, x.at<const float>(at), step, k_lo, k_hi, row);
      else
        scatter_phases(x.at<const float>(at), step, first + k_lo, first + k_hi, first, 2, row, kPhaseLen,
                       ops.deinterleave);
    }
  }
}

template <const WinogradOps& (*kOps)(), int kM, int kR>
absl::Status conv2d_winograd(const KernelArgs& args) {
  constexpr int64_t kN = kM + kR - 1, kXis = kN * kN, kExtra = extra_entries(kM, kR);
  constexpr int kTransform = kM == 4 ? 2 : kR / 5;  // WinogradOps' transforms
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const WinogradOps& ops = kOps();
  const KernelInput& x = args.inputs[0];
  const Conv2dAttrs& attrs = args.node.attrs_as<Conv2dAttrs>();
  const TensorView* bias = attrs.has_bias(args.inputs.size()) ? &args.inputs[2] : nullptr;
  const conv::Epilogue epilogue(attrs, args.inputs, ops.finish);
  // Without a residual, relu is the last step of the output transform (no pass of its own).
  const bool relu_in_transform = attrs.relu && epilogue.residual == nullptr;
  Geometry g = geometry_of(x.shape, args.inputs[1].shape, args.node.shape, attrs);
  g.m = kM;
  ScratchCarver carver(args.scratch);
  const float* u = static_cast<const float*>(args.node.prepared);
  if (u == nullptr) {
    float* own = carver.take<float>(g.u_floats());
    if (own == nullptr) return absl::InternalError("[conv2d] kernel scratch too small");
    transform_weights(g, ops.ocb, args.inputs[1], box.begin(1), box.end(1), own);
    u = own;
  }
  float* rows = carver.take<float>(g.rows_floats());
  float* v = carver.take<float>(g.v_floats());
  float* m = carver.take<float>(g.m_floats());
  float* out_rows = carver.take<float>(kMaxOcb * kM * kM * kTiles);
  if (rows == nullptr || v == nullptr || m == nullptr || out_rows == nullptr)
    return absl::InternalError("[conv2d] kernel scratch too small");
  // A block's output channels' rows: all of them are transformed before the first is stored, so
  // that the stores' reads (misaligned against the transform's stores) do not wait on stores still
  // in flight (store_runs' loads took 43% of its time with one channel's rows at a time).
  float* out_row_of[kMaxOcb][kM];
  for (int64_t j = 0; j < kMaxOcb; ++j)
    for (int64_t r = 0; r < kM; ++r) out_row_of[j][r] = out_rows + (j * kM + r) * kM * kTiles;
  const int64_t ocb = ops.ocb, lanes = ops.lanes;
  const int64_t xi_v = kTiles, c_v = kXis * kTiles, xi_u = g.channels * ocb, xi_m = ocb * kTiles;
  const int64_t out_step = args.out.strides[3];
  const int64_t tx_begin = box.begin(3) / kM, tx_end = (box.end(3) + kM - 1) / kM;
  const int64_t ty_begin = box.begin(2) / kM, ty_end = (box.end(2) + kM - 1) / kM;
  // A chunk gives the gemm up to kTiles tiles: segments (runs of one tile row's tiles) packed
  // one after another, each footprint() entries after the previous one's start, so that the
  // transform of a segment's last tile reads its own columns only. The input transform drops
  // the entries between segments (keep), so the gemm and the output transform see the tiles
  // alone: a chunk takes whole tile rows of a narrow box (an edit's) and cuts the row that does
  // not fit, filling its vectors. Which tiles share a chunk never changes an output's operations.
  struct Segment {
    int64_t ty, tx0, tiles, offset, first;  // offset: its first entry; first: its first tile in the chunk
  };
  Segment segments[kTiles];
  OutRun runs[kM * kTiles];
  const bool unit_steps = out_step == 1 && (epilogue.residual == nullptr || epilogue.residual->strides[3] == 1);
  uint32_t keep[kEntries / 8 + 1];
  for (int64_t n = box.begin(0); n < box.end(0); ++n)
    for (int64_t ty = ty_begin, tx0 = tx_begin; ty < ty_end;) {
      int64_t count = 0, entries = 0, tiles_in = 0;
      while (ty < ty_end && tiles_in < kTiles) {
        int64_t tiles = std::min({kTiles - tiles_in, tx_end - tx0, kEntries - entries - kExtra});
        if (count > 0 && tiles < tx_end - tx0) {
          // A row that does not fit is cut only to fill the chunk's last vector, and only when
          // that vector is at least a quarter empty (a cut costs a segment, and the gaps cost
          // the input transform a vector more).
          const int64_t empty = (tiles_in + lanes - 1) / lanes * lanes - tiles_in;
          tiles = empty >= lanes / 4 ? std::min(tiles, empty) : 0;
        }
        if (tiles <= 0) break;
        segments[count++] = {ty, tx0, tiles, entries, tiles_in};
        entries += footprint(kM, kR, tiles);
        tiles_in += tiles;
        tx0 += tiles;
        if (tx0 >= tx_end) {
          tx0 = tx_begin;
          ++ty;
        }
      }
      const int64_t entry_vectors = (entries + lanes - 1) / lanes, vectors = (tiles_in + lanes - 1) / lanes;
      std::fill_n(keep, entry_vectors, 0u);
      for (int64_t k = 0; k < count; ++k)
        for (int64_t e = segments[k].offset; e < segments[k].offset + segments[k].tiles; ++e)
          keep[e / lanes] |= 1u << (e % lanes);
      for (int64_t k = 0; k < count; ++k)  // the chunk's residual rows, read while the gemm runs
        for (int64_t oh = kM * segments[k].ty; oh < kM * segments[k].ty + kM; ++oh)
          if (oh >= box.begin(2) && oh < box.end(2))
            epilogue.prefetch(n, box.begin(1), box.end(1), oh, std::max(kM * segments[k].tx0, box.begin(3)),
                              std::min(kM * (segments[k].tx0 + segments[k].tiles), box.end(3)));
      // A group of input channels at a time: their rows packed, then transformed while the rows
      // are in the L1 cache (packing every channel's rows first sent them through the L2 cache).
      const int64_t group = std::min(kChannelGroup, g.channels);
      for (int64_t c0 = 0; c0 < g.channels; c0 += group) {
        const int64_t c1 = std::min(c0 + group, g.channels), width = c1 - c0;
        for (int64_t k = 0; k < count; ++k)
          pack_rows(ops, g, x, n, c0, c1, segments[k].ty, segments[k].tx0, segments[k].tiles, segments[k].offset, rows);
        // The entries past the last segment that the last vector's transform reads.
        for (int64_t row = 0; row < kN * width; ++row)
          for (int64_t phase = 0; phase < kM; ++phase)
            std::fill(rows + (kM * row + phase) * kPhaseLen + std::min(entries, entry_vectors * lanes + kExtra),
                      rows + (kM * row + phase) * kPhaseLen + entry_vectors * lanes + kExtra, 0.0f);
        for (int64_t c = c0; c < c1; ++c) {
          const float* channel_rows[kN];
          for (int64_t r = 0; r < kN; ++r) channel_rows[r] = rows + (r * width + c - c0) * kM * kPhaseLen;
          ops.input_transform[kTransform](channel_rows, kPhaseLen, entry_vectors, keep, v + c * c_v, xi_v);
        }
      }
      // The chunk's output runs, the same for every channel (-1: steps other than 1, per run).
      int64_t run_count = -1;
      if (unit_steps) {
        run_count = 0;
        for (int64_t k = 0; k < count; ++k) {
          const Segment& seg = segments[k];
          const int64_t ow_begin = std::max(kM * seg.tx0, box.begin(3)), ow_end = std::min(kM * (seg.tx0 + seg.tiles), box.end(3));
          for (int64_t r = 0; r < kM; ++r) {
            const int64_t oh = kM * seg.ty + r;
            if (oh < box.begin(2) || oh >= box.end(2) || ow_begin >= ow_end) continue;
            runs[run_count++] = {r, ow_end - ow_begin, kM * seg.first + (ow_begin - kM * seg.tx0),
                                 (oh - box.begin(2)) * args.out.strides[2] + (ow_begin - box.begin(3)),
                                 epilogue.residual != nullptr ? (oh - box.begin(2)) * epilogue.residual->strides[2] +
                                                                    (ow_begin - box.begin(3))
                                                              : 0};
          }
        }
      }
      // Output channels by blocks of U (the channels of a block outside the box are computed,
      // not stored).
      for (int64_t o0 = box.begin(1) / ocb * ocb; o0 < box.end(1); o0 += ocb) {
        const float* u_block = u + o0 / ocb * g.u_block(ocb);
        for (int64_t xi = 0; xi < kXis; ++xi) {
          // The next gemm's U, fetched while this one runs (one stream, kept in order).
          const char* next = reinterpret_cast<const char*>(u_block + (xi + 1) * xi_u);
          if (xi + 1 < kXis || o0 + ocb < box.end(1))
            for (int64_t b = 0; b < xi_u * static_cast<int64_t>(sizeof(float)); b += 64) __builtin_prefetch(next + b);
          for (int64_t k = 0; k < vectors;) {
            const int64_t count_v = std::min<int64_t>(ops.gemm_vectors, vectors - k);
            ops.gemm[count_v - 1](u_block + xi * xi_u, ocb, v + xi * xi_v + k * lanes, c_v, g.channels,
                                  m + xi * xi_m + k * lanes, kTiles);
            k += count_v;
          }
        }
        const int64_t j_begin = std::max<int64_t>(0, box.begin(1) - o0), j_end = std::min(ocb, box.end(1) - o0);
        for (int64_t j = j_begin; j < j_end; ++j) {
          const int64_t o = o0 + j;
          ops.output_transform[kTransform](m + j * kTiles, xi_m, vectors, bias != nullptr ? bias->at<const float>(&o) : nullptr,
                                       relu_in_transform, out_row_of[j]);
        }
        for (int64_t j = j_begin; j < j_end; ++j) {
          const int64_t o = o0 + j;
          float* const* out_row = out_row_of[j];
          if (run_count >= 0) {  // unit steps: the chunk's runs in one call
            const int64_t at[4] = {n, o, box.begin(2), box.begin(3)};
            ops.store_runs(out_row, runs, run_count, args.out.at<float>(at),
                           epilogue.residual != nullptr ? epilogue.residual->at<const float>(at) : nullptr,
                           epilogue.residual_first, epilogue.relu && epilogue.residual != nullptr);
            continue;
          }
          for (int64_t k = 0; k < count; ++k) {
            const Segment& seg = segments[k];
            // Output columns [ow_begin, ow_end) of the segment's tiles are in the box.
            const int64_t ow_begin = std::max(kM * seg.tx0, box.begin(3)),
                          ow_end = std::min(kM * (seg.tx0 + seg.tiles), box.end(3));
            for (int64_t r = 0; r < kM; ++r) {
              const int64_t oh = kM * seg.ty + r;
              if (oh < box.begin(2) || oh >= box.end(2)) continue;
              const int64_t at[4] = {n, o, oh, ow_begin};
              float* dst = args.out.at<float>(at);
              const float* src = out_row[r] + kM * seg.first + (ow_begin - kM * seg.tx0);
              if (epilogue.residual != nullptr) {
                epilogue.finish(src, ow_end - ow_begin, dst, out_step, n, o, oh, ow_begin);
              } else if (out_step == 1) {
                std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(ow_end - ow_begin));
              } else {
                for (int64_t i = 0; i < ow_end - ow_begin; ++i) dst[i * out_step] = src[i];
              }
            }
          }
        }
      }
    }
  return absl::OkStatus();
}

#if TESSERA_HAVE_AVX2_PATHS
const WinogradOps& avx2_ops() {
  static const WinogradOps ops = [] {
    WinogradOps o = avx2_winograd_ops();
    o.finish = avx2_micro_table().finish;
    return o;
  }();
  return ops;
}
const WinogradOps& avx512_ops() {
  static const WinogradOps ops = [] {
    WinogradOps o = avx512_winograd_ops();
    o.finish = avx512_micro_table().finish;
    return o;
  }();
  return ops;
}
#endif

}  // namespace

KernelFn winograd_kernel(const Graph& graph, const Node& node, Isa isa) {
  if (!eligible(graph, node)) return nullptr;
  const bool five = graph.node(node.inputs[1]).shape[2] == 5, four = geometry_of(graph, node).m == 4;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa >= Isa::Avx512)
    return five ? conv2d_winograd<avx512_ops, 2, 5>
                : four ? conv2d_winograd<avx512_ops, 4, 3> : conv2d_winograd<avx512_ops, 2, 3>;
  if (isa == Isa::Avx2)
    return five ? conv2d_winograd<avx2_ops, 2, 5>
                : four ? conv2d_winograd<avx2_ops, 4, 3> : conv2d_winograd<avx2_ops, 2, 3>;
#endif
  (void)five;
  (void)four;
  (void)isa;
  return nullptr;
}

int64_t winograd_scratch_bytes(const Graph& graph, const Node& node) {
  if (!eligible(graph, node)) return 0;
  const Geometry g = geometry_of(graph, node);
  return scratch_take_bytes<float>(g.u_floats()) + scratch_take_bytes<float>(g.rows_floats()) +
         scratch_take_bytes<float>(g.v_floats()) + scratch_take_bytes<float>(g.m_floats()) +
         scratch_take_bytes<float>(kMaxOcb * g.m * g.m * kTiles);
}

namespace {

bool prepares(const Graph& graph, const Node& node, KernelFn kernel) {
  if (kernel == nullptr || !eligible(graph, node) ||
      graph.node(node.inputs[1]).kind != OpKind::Constant)
    return false;
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Amx})
    if (kernel == winograd_kernel(graph, node, isa)) return true;
  return false;
}

}  // namespace

int64_t winograd_prepared_bytes(const Graph& graph, const Node& node, KernelFn kernel) {
  return prepares(graph, node, kernel)
             ? geometry_of(graph, node).u_floats() * static_cast<int64_t>(sizeof(float))
             : 0;
}

std::shared_ptr<const void> winograd_prepare(const Graph& graph, const Node& node,
                                             KernelFn kernel) {
  if (!prepares(graph, node, kernel)) return nullptr;
  const Node& w = graph.node(node.inputs[1]);
  const void* data = graph.constant_data(w.constant).data;
  if (data == nullptr) return nullptr;
  const Geometry g = geometry_of(graph, node);
  std::shared_ptr<float[]> u(new (std::nothrow) float[static_cast<size_t>(g.u_floats())]);
  if (u == nullptr) return nullptr;  // the kernel transforms the weights itself
#if TESSERA_HAVE_AVX2_PATHS
  const int64_t ocb = kernel == winograd_kernel(graph, node, Isa::Avx2) ? avx2_ops().ocb : avx512_ops().ocb;
#else
  const int64_t ocb = kMaxOcb;
#endif
  transform_weights(g, ocb, dense_view(const_cast<void*>(data), DType::F32, Box::full(w.shape)), 0,
                    g.out_channels, u.get());
  return u;
}

}  // namespace tessera::cpu::conv
