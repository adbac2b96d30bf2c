// The op list, the typed attributes of every op and the builder API.
//
// TESSERA_OPS below is the one list of op kinds. Each entry X(Kind, name) generates the OpKind
// enumerator, the attribute type Kind##Attrs held by Node::attrs (the OpAttrs variant, in list
// order), the definition block k##Kind##Def (engine/ops_*.cc, looked up by op_def) and the
// reference kernel ref::name (kernels/ref/*.cc). Adding an op: its entry, its attribute struct
// and its builder declaration here; one definition block; one reference kernel; one test.
//
// Builders are free functions that add nodes to the graph of their inputs. Every function
// validates shapes, dtypes and attributes and throws tessera::Error with a message starting
// "[op]" on bad input. Negative axes count from the end.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include "engine/dtype.h"

namespace tessera {

struct Tensor;
class Graph;

enum class UnaryFn : int64_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Sign, Reciprocal, Relu, Sigmoid, Tanh, Sin, Cos,
  GeluTanh, GeluErf, Silu, Floor, Ceil, Round, Erf, Count,
};
enum class BinaryFn : int64_t {
  Add, Sub, Mul, Div, Pow, Minimum, Maximum, Eq, Ne, Lt, Le, Gt, Ge, Count,
};
enum class ReduceFn : int64_t { Sum, Mean, Max, Min, Prod, Argmax, Argmin, Count };
enum class PoolKind : int64_t { Max, Avg };
enum class RopeMode : int64_t { HalfSplit, Interleaved };
// conv2d's residual epilogue (Conv2dAttrs::residual): none, conv + residual, residual + conv
// (the order of the add the conv stands for).
enum class ConvResidual : int64_t { None, ConvFirst, ResidualFirst };
enum class RandDist : int64_t { Uniform, Normal };

// Lower-case names ("exp", "add", "sum"); "?" for values outside the enum.
std::string_view fn_name(UnaryFn fn);
std::string_view fn_name(BinaryFn fn);
std::string_view fn_name(ReduceFn fn);

// A list of small integers (axes, per-axis amounts, shapes); same type as Shape.
using Ints = absl::InlinedVector<int64_t, kMaxRank>;

// ---- attributes ---------------------------------------------------------------------------
// One struct per op kind: plain fields with defaults, defaulted equality, fields() (a tuple of
// references that graph hashing visits field by field) and to_string() (defined next to the
// op's definition block, used by op_display_name and plan dumps). Rules and kernels read them
// with node.attrs_as<Kind##Attrs>(). Validation happens in the op's infer.
#define TESSERA_ATTRS(Type, ...)                                 \
  friend bool operator==(const Type&, const Type&) = default;   \
  auto fields() const { return std::tie(__VA_ARGS__); }          \
  std::string to_string() const

struct InputAttrs {
  std::string name;
  TESSERA_ATTRS(InputAttrs, name);  // "input.<name>"
};
struct ConstantAttrs {
  TESSERA_ATTRS(ConstantAttrs);
};
struct UnaryAttrs {
  UnaryFn fn = UnaryFn::Neg;
  TESSERA_ATTRS(UnaryAttrs, fn);  // "unary.exp"
};
struct BinaryAttrs {
  BinaryFn fn = BinaryFn::Add;
  TESSERA_ATTRS(BinaryAttrs, fn);  // "binary.add"
};
struct WhereAttrs {
  TESSERA_ATTRS(WhereAttrs);
};
struct CastAttrs {
  DType dtype = DType::F32;  // target
  TESSERA_ATTRS(CastAttrs, dtype);
};
struct ReduceAttrs {
  ReduceFn fn = ReduceFn::Sum;
  Ints axes;  // normalised, sorted, unique; empty reduces nothing (the builder fills "all")
  bool keepdims = false;
  TESSERA_ATTRS(ReduceAttrs, fn, axes, keepdims);  // "reduce.sum{axes=[0,2],keepdims=0}"
};
struct CumsumAttrs {
  int64_t axis = 0;  // normalised
  TESSERA_ATTRS(CumsumAttrs, axis);
};
struct MatmulAttrs {
  TESSERA_ATTRS(MatmulAttrs);
};
struct LinearAttrs {
  TESSERA_ATTRS(LinearAttrs);
};
struct ReshapeAttrs {
  Shape shape;  // target, no -1 (the builder resolves it)
  TESSERA_ATTRS(ReshapeAttrs, shape);
};
struct PermuteAttrs {
  Ints perm;  // output dim i is input dim perm[i]
  TESSERA_ATTRS(PermuteAttrs, perm);
};
struct SliceAttrs {
  Ints start, stop, step;  // per axis: 0 <= start <= stop <= dim, step >= 1
  TESSERA_ATTRS(SliceAttrs, start, stop, step);
};
struct PadAttrs {
  Ints before, after;  // per axis, >= 0
  double value = 0;
  TESSERA_ATTRS(PadAttrs, before, after, value);
};
struct ConcatAttrs {
  int64_t axis = 0;  // normalised
  TESSERA_ATTRS(ConcatAttrs, axis);
};
struct RepeatAttrs {
  Ints repeats;  // per axis, >= 1
  TESSERA_ATTRS(RepeatAttrs, repeats);
};
struct FlipAttrs {
  Ints axes;  // normalised, sorted, unique
  TESSERA_ATTRS(FlipAttrs, axes);
};
struct ExpandAttrs {
  Shape shape;  // target
  TESSERA_ATTRS(ExpandAttrs, shape);
};
struct GatherAttrs {
  TESSERA_ATTRS(GatherAttrs);
};
struct TriangleAttrs {
  bool upper = true;  // triu (keeps col - row >= k) or tril (keeps col - row <= k)
  int64_t k = 0;
  TESSERA_ATTRS(TriangleAttrs, upper, k);
};
struct ArangeAttrs {
  int64_t n = 0;
  double start = 0, step = 1;
  DType dtype = DType::F32;
  TESSERA_ATTRS(ArangeAttrs, n, start, step, dtype);
};
struct RandAttrs {
  RandDist dist = RandDist::Uniform;
  uint64_t seed = 0;
  DType dtype = DType::F32;
  Shape shape;
  TESSERA_ATTRS(RandAttrs, dist, seed, dtype, shape);
};
struct SoftmaxAttrs {
  int64_t axis = 0;  // normalised
  bool log = false;  // log_softmax
  TESSERA_ATTRS(SoftmaxAttrs, axis, log);
};
struct RmsNormAttrs {
  double eps = 0;
  TESSERA_ATTRS(RmsNormAttrs, eps);
};
// Optional parameters are inputs 1.. in the order weight, bias, those present.
struct LayerNormAttrs {
  double eps = 0;
  bool has_weight = false, has_bias = false;
  TESSERA_ATTRS(LayerNormAttrs, eps, has_weight, has_bias);
};
struct GroupNormAttrs {
  int64_t groups = 1;
  double eps = 0;
  bool has_weight = false, has_bias = false;
  TESSERA_ATTRS(GroupNormAttrs, groups, eps, has_weight, has_bias);
};
struct RopeAttrs {
  int64_t n_rot = 0;
  double base = 10000.0;
  RopeMode mode = RopeMode::HalfSplit;
  double freq_scale = 1.0;
  TESSERA_ATTRS(RopeAttrs, n_rot, base, mode, freq_scale);
};
// Also the public parameter struct of conv2d (Conv2dParams). Inputs: x, weight, the bias when
// present, then the residual when `residual` is set (bias presence is the input count).
// The epilogue makes conv2d a composite (its decomposition: the plain conv, then a binary add of
// the residual in the given operand order, then unary relu): y = conv + bias, y = y + residual
// (or residual + y), y = relu(y), each rounded to the dtype as the separate ops would be. The
// fusion pass folds a user's relu(conv(...) + skip) into it (planner/fuse_patterns.cc).
struct Conv2dAttrs {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1,
          groups = 1;
  ConvResidual residual = ConvResidual::None;
  bool relu = false;
  // The output tile the region rules allow the kernels (conv2d_output_tile, engine/op_def.h):
  // 1 keeps the rules to the receptive field (an edit recomputes the receptive field only; the
  // CPU backend runs 2x2 Winograd tiles whose outputs depend on their own receptive fields);
  // 4 lets a conv the 4x4 Winograd kernel takes be computed in 4x4 tiles, each output's bits
  // depending on its tile's whole input window, so dirt spreads over whole tiles: ~1.3x faster
  // full forwards (a VAE decoder run on every new latent), edits' dirt growing by a tile a layer.
  int64_t tile = 1;
  TESSERA_ATTRS(Conv2dAttrs, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, residual, relu, tile);
  // Of a node with `inputs` inputs: whether the bias is present, and the residual's index (-1: none).
  bool has_bias(size_t inputs) const { return inputs == (residual != ConvResidual::None ? 4u : 3u); }
  int residual_input(size_t inputs) const {
    return residual != ConvResidual::None ? static_cast<int>(inputs) - 1 : -1;
  }
  bool has_epilogue() const { return residual != ConvResidual::None || relu; }
};
struct Pool2dAttrs {
  PoolKind kind = PoolKind::Max;
  int64_t kernel = 1, stride = 1, padding = 0;
  TESSERA_ATTRS(Pool2dAttrs, kind, kernel, stride, padding);
};
struct UpsampleAttrs {
  int64_t scale = 1;
  TESSERA_ATTRS(UpsampleAttrs, scale);
};
// Also the public parameter struct of attention (AttentionParams).
struct AttentionAttrs {
  double scale = 1.0;
  bool causal = true;
  int64_t window = 0;
  double softcap = 0.0;
  TESSERA_ATTRS(AttentionAttrs, scale, causal, window, softcap);
};
struct RopeMultiAttrs {
  Ints axes_dims;  // d_a per position axis, each even and > 0
  double base = 10000.0;
  TESSERA_ATTRS(RopeMultiAttrs, axes_dims, base);
};
// FusedElementwiseAttrs (it names OpKind) follows the op list below.

// ---- the op list ----------------------------------------------------------------------------
#define TESSERA_OPS(X)        \
  X(Input, input)             \
  X(Constant, constant)       \
  X(Unary, unary)             \
  X(Binary, binary)           \
  X(Where, where)             \
  X(Cast, cast)               \
  X(Reduce, reduce)           \
  X(Cumsum, cumsum)           \
  X(Matmul, matmul)           \
  X(Linear, linear)           \
  X(Reshape, reshape)         \
  X(Permute, permute)         \
  X(Slice, slice)             \
  X(Pad, pad)                 \
  X(Concat, concat)           \
  X(Repeat, repeat)           \
  X(Flip, flip)               \
  X(Expand, expand)           \
  X(Gather, gather)           \
  X(Triangle, triangle)       \
  X(Arange, arange)           \
  X(Rand, rand)               \
  X(Softmax, softmax)         \
  X(RmsNorm, rms_norm)        \
  X(LayerNorm, layer_norm)    \
  X(GroupNorm, group_norm)    \
  X(Rope, rope)               \
  X(Conv2d, conv2d)           \
  X(Pool2d, pool2d)           \
  X(Upsample, upsample)       \
  X(Attention, attention)     \
  X(RopeMulti, rope_multi)    \
  X(FusedElementwise, fused_elementwise)

enum class OpKind : uint8_t {
#define TESSERA_OP_KIND(kind, name) kind,
  TESSERA_OPS(TESSERA_OP_KIND)
#undef TESSERA_OP_KIND
  Count,
};

// One instruction of a fused elementwise program (FusedElementwiseAttrs). kind is Unary (fn is
// a UnaryFn, operand a) or Binary (fn is an arithmetic BinaryFn, operands a and b). An operand
// indexes the fused node's inputs (0 .. n_inputs - 1) or an earlier instruction's result
// (n_inputs + j); unused operands are -1.
struct FusedInstr {
  OpKind kind = OpKind::Unary;
  int64_t fn = 0;
  int32_t a = -1;
  int32_t b = -1;
  friend bool operator==(const FusedInstr&, const FusedInstr&) = default;
  auto fields() const { return std::tie(kind, fn, a, b); }
};
// A chain of f32 elementwise unary / binary (numpy-broadcasting) ops evaluated as one op; the
// last instruction is the result. Each instruction rounds to f32 as the unfused op would.
struct FusedElementwiseAttrs {
  std::vector<FusedInstr> program;
  // "fused_elementwise{mul(0,1),exp(3),add(4,2)}"
  TESSERA_ATTRS(FusedElementwiseAttrs, program);
};

#undef TESSERA_ATTRS

namespace detail {
// std::variant of the listed types without the trailing sentinel.
template <class Done, class... Rest>
struct DropLast;
template <class... Done, class Last>
struct DropLast<std::variant<Done...>, Last> {
  using type = std::variant<Done...>;
};
template <class... Done, class Next, class... Rest>
struct DropLast<std::variant<Done...>, Next, Rest...> {
  using type = typename DropLast<std::variant<Done..., Next>, Rest...>::type;
};
}  // namespace detail

// The attributes of a node: alternative i is the attribute type of OpKind i.
#define TESSERA_OP_ATTRS_TYPE(kind, name) kind##Attrs,
using OpAttrs = detail::DropLast<std::variant<>, TESSERA_OPS(TESSERA_OP_ATTRS_TYPE) void>::type;
#undef TESSERA_OP_ATTRS_TYPE

// The op kind whose attribute type is A (OpKind::Count for other types).
template <class A>
inline constexpr OpKind op_kind_of = OpKind::Count;
#define TESSERA_OP_KIND_OF(kind, name) \
  template <>                          \
  inline constexpr OpKind op_kind_of<kind##Attrs> = OpKind::kind;
TESSERA_OPS(TESSERA_OP_KIND_OF)
#undef TESSERA_OP_KIND_OF

// The kind an attribute value belongs to.
inline OpKind attrs_kind(const OpAttrs& attrs) { return static_cast<OpKind>(attrs.index()); }

// ---- builders -------------------------------------------------------------------------------

// Elementwise. Float-only functions (exp, log, ...) reject integer inputs; round is
// half-to-even. Integer div truncates towards zero.
Tensor unary(UnaryFn fn, Tensor x);
Tensor neg(Tensor x);
Tensor exp(Tensor x);
Tensor log(Tensor x);
Tensor sqrt(Tensor x);
Tensor rsqrt(Tensor x);
Tensor abs(Tensor x);
Tensor sign(Tensor x);
Tensor reciprocal(Tensor x);
Tensor relu(Tensor x);
Tensor sigmoid(Tensor x);
Tensor tanh(Tensor x);
Tensor sin(Tensor x);
Tensor cos(Tensor x);
Tensor gelu(Tensor x, bool tanh_approximation = false);
Tensor silu(Tensor x);
Tensor floor(Tensor x);
Tensor ceil(Tensor x);
Tensor round(Tensor x);
Tensor erf(Tensor x);

// Binary with numpy broadcasting; both inputs must have the same dtype. Comparisons give bool.
Tensor binary(BinaryFn fn, Tensor a, Tensor b);
Tensor add(Tensor a, Tensor b);
Tensor sub(Tensor a, Tensor b);
Tensor mul(Tensor a, Tensor b);
Tensor div(Tensor a, Tensor b);
Tensor pow(Tensor a, Tensor b);
Tensor minimum(Tensor a, Tensor b);
Tensor maximum(Tensor a, Tensor b);
Tensor eq(Tensor a, Tensor b);
Tensor ne(Tensor a, Tensor b);
Tensor lt(Tensor a, Tensor b);
Tensor le(Tensor a, Tensor b);
Tensor gt(Tensor a, Tensor b);
Tensor ge(Tensor a, Tensor b);
Tensor operator+(Tensor a, Tensor b);
Tensor operator-(Tensor a, Tensor b);
Tensor operator*(Tensor a, Tensor b);
Tensor operator/(Tensor a, Tensor b);
// cond (bool) ? a : b, broadcast over all three.
Tensor where(Tensor cond, Tensor a, Tensor b);
Tensor cast(Tensor x, DType dtype);

// Reductions over `axes` (empty = all axes). argmax/argmin take exactly one axis and give i64;
// ties pick the first index.
Tensor reduce(ReduceFn fn, Tensor x, std::vector<int64_t> axes, bool keepdims = false);
Tensor sum(Tensor x, std::vector<int64_t> axes, bool keepdims = false);
Tensor mean(Tensor x, std::vector<int64_t> axes, bool keepdims = false);
Tensor max(Tensor x, std::vector<int64_t> axes, bool keepdims = false);
Tensor min(Tensor x, std::vector<int64_t> axes, bool keepdims = false);
Tensor prod(Tensor x, std::vector<int64_t> axes, bool keepdims = false);
Tensor argmax(Tensor x, int64_t axis, bool keepdims = false);
Tensor argmin(Tensor x, int64_t axis, bool keepdims = false);
Tensor cumsum(Tensor x, int64_t axis);

// [..., M, K] x [..., K, N] -> [..., M, N]; batch dims broadcast; rank >= 2 each.
Tensor matmul(Tensor a, Tensor b);
// x [..., K] times the transpose of weight [N, K] -> [..., N], in the dtype of x. The weight may
// be any float dtype or block-quantised (rows of K elements, whole blocks), dequantised in the kernel.
Tensor linear(Tensor x, Tensor weight);

// Movement: plain dtypes, values copied bit-exactly. reshape keeps the row-major order and
// accepts one -1 entry; permute's output dim i is input dim perm[i].
Tensor reshape(Tensor x, const Shape& shape);
Tensor permute(Tensor x, std::vector<int64_t> perm);
Tensor transpose(Tensor x, int64_t axis0, int64_t axis1);
// Elements start, start + step, ... below stop along one axis (step >= 1). start and stop are
// clamped into [0, dim] (negative values clamp to 0, they do not count from the end).
Tensor slice(Tensor x, int64_t axis, int64_t start, int64_t stop, int64_t step = 1);
// before/after: one non-negative amount per axis; value is converted to x's dtype.
Tensor pad(Tensor x, std::vector<int64_t> before, std::vector<int64_t> after, float value = 0);
// 1..64 inputs of one dtype, equal dims except on axis.
Tensor concat(std::span<const Tensor> xs, int64_t axis);
// Consecutive slices of the given sizes (non-negative, summing to x.dim(axis)).
std::vector<Tensor> split(Tensor x, int64_t axis, std::vector<int64_t> sizes);
// Inputs of equal shape joined along a new axis (in [-(rank + 1), rank]).
Tensor stack(std::span<const Tensor> xs, int64_t axis);
// Tiles x: output dim i is x.dim(i) * repeats[i] (repeats >= 1, one per axis).
Tensor repeat(Tensor x, std::vector<int64_t> repeats);
// Reverses the listed axes (each at most once; an empty list flips nothing).
Tensor flip(Tensor x, std::vector<int64_t> axes);
// Broadcasts size-1 dims (and new leading dims) to `shape`.
Tensor expand(Tensor x, const Shape& shape);

// Embedding lookup: table [V, ...rest], integer ids [...] -> [..., ...rest]. An id outside
// [0, V) fails the read with an error.
Tensor gather(Tensor table, Tensor ids);
Tensor embedding(Tensor table, Tensor ids);  // = gather(table, ids)
// Keeps elements on and above (triu) / below (tril) diagonal k of the last two dims, zeroes the rest.
Tensor triu(Tensor x, int64_t k = 0);
Tensor tril(Tensor x, int64_t k = 0);
// [n] values start + i * step.
Tensor arange(Graph& g, int64_t n, double start = 0, double step = 1, DType dtype = DType::F32);
// Counter-based random values: element i of the flattened tensor depends only on (seed, i).
Tensor rand(Graph& g, const Shape& shape, uint64_t seed, DType dtype = DType::F32);
Tensor randn(Graph& g, const Shape& shape, uint64_t seed, DType dtype = DType::F32);

// Normalisations and activations with their own exact rules.
Tensor softmax(Tensor x, int64_t axis = -1);
Tensor log_softmax(Tensor x, int64_t axis = -1);
// x * rsqrt(mean(x^2, last axis) + eps) * weight (weight [D] optional: pass Tensor{}).
Tensor rms_norm(Tensor x, Tensor weight, double eps);
Tensor layer_norm(Tensor x, Tensor weight, Tensor bias, double eps);
// x [N, C, ...spatial]; statistics per (sample, group of C/groups channels); weight, bias [C].
Tensor group_norm(Tensor x, int64_t groups, Tensor weight, Tensor bias, double eps);
// Rotary embedding of x [..., T, H, D] at positions pos [T] (integer), rotating the first
// n_rot dims with frequencies base^(-2i/n_rot) * freq_scale.
Tensor rope(Tensor x, Tensor positions, int64_t n_rot, double base, RopeMode mode,
            double freq_scale = 1.0);
// x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] optional (pass Tensor{}); zero
// padding, float inputs of one dtype. params.relu applies relu to the result; the second form
// adds `residual` (the output's shape and dtype) before it, in the order params.residual names
// (None means ConvFirst there). The first form throws when params.residual is set.
using Conv2dParams = Conv2dAttrs;
Tensor conv2d(Tensor x, Tensor weight, Tensor bias, const Conv2dParams& params = {});
Tensor conv2d(Tensor x, Tensor weight, Tensor bias, Tensor residual, Conv2dParams params);
// x [N, C, H, W] float, square window, padding in [0, kernel); max ignores padding, average
// pooling counts it (count_include_pad).
Tensor pool2d(Tensor x, PoolKind kind, int64_t kernel, int64_t stride, int64_t padding = 0);
// Nearest-neighbour upsampling of the last two dims by an integer factor >= 1; any dtype.
Tensor upsample_nearest(Tensor x, int64_t scale);
// Attention over sequence-major tensors: q [..., T, Hq, D], k [..., S, Hkv, D],
// v [..., S, Hkv, Dv] -> [..., T, Hq, Dv]; Hq a multiple of Hkv (GQA). causal requires T == S;
// window > 0 lets query t see keys (t - window, t]; softcap > 0 applies softcap*tanh(s/softcap)
// to the scaled scores. window requires causal.
using AttentionParams = AttentionAttrs;
Tensor attention(Tensor q, Tensor k, Tensor v, const AttentionParams& params);
// Multi-axis rotary embedding (Flux): x [..., T, H, D] float, positions [T, A] integer,
// axes_dims {d_0 .. d_{A-1}} (each even, sum <= D). Axis a rotates the dims
// [sum_{j<a} d_j, + d_a) of every head: pair i (dims 2i, 2i + 1 of that block) turns by
// pos[t, a] * base^(-2i / d_a). Dims past sum(d_a) pass through.
Tensor rope_multi(Tensor x, Tensor positions, std::vector<int64_t> axes_dims, double base = 10000.0);

// A chain of elementwise ops as one node (built by the planner's fusion pass; also usable
// directly): 1..16 f32 inputs, 1..64 instructions (FusedInstr above) over arithmetic unary and
// binary functions (no comparisons), operands referring backwards only, every input and every
// instruction result used. Shapes broadcast per instruction as binary() does; the output is the
// last instruction's shape, f32. Values are bitwise those of the unfused chain on each backend.
Tensor fused_elementwise(std::span<const Tensor> inputs, std::vector<FusedInstr> program);

}  // namespace tessera

// Builders take Tensor by value; callers get the complete type from here.
#include "engine/graph.h"  // IWYU pragma: export
