// The op builder API: free functions that add nodes to the graph of their inputs.
// Every function validates shapes, dtypes and attributes and throws tessera::Error with a
// message starting "[op]" on bad input. Negative axes count from the end.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/graph.h"

namespace tessera {

enum class UnaryFn : int64_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Sign, Reciprocal, Relu, Sigmoid, Tanh, Sin, Cos,
  GeluTanh, GeluErf, Silu, Floor, Ceil, Round, Count,
};
enum class BinaryFn : int64_t {
  Add, Sub, Mul, Div, Pow, Minimum, Maximum, Eq, Ne, Lt, Le, Gt, Ge, Count,
};
enum class ReduceFn : int64_t { Sum, Mean, Max, Min, Prod, Argmax, Argmin, Count };
enum class PoolKind : int64_t { Max, Avg };
enum class RopeMode : int64_t { HalfSplit, Interleaved };
enum class RandDist : int64_t { Uniform, Normal };

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
inline Tensor embedding(Tensor table, Tensor ids) { return gather(table, ids); }
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
// padding, float inputs of one dtype.
struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1,
          groups = 1;
};
Tensor conv2d(Tensor x, Tensor weight, Tensor bias, const Conv2dParams& params = {});
// x [N, C, H, W] float, square window, padding in [0, kernel); max ignores padding, average
// pooling counts it (count_include_pad).
Tensor pool2d(Tensor x, PoolKind kind, int64_t kernel, int64_t stride, int64_t padding = 0);
// Nearest-neighbour upsampling of the last two dims by an integer factor >= 1; any dtype.
Tensor upsample_nearest(Tensor x, int64_t scale);
// Attention over sequence-major tensors: q [..., T, Hq, D], k [..., S, Hkv, D],
// v [..., S, Hkv, Dv] -> [..., T, Hq, Dv]; Hq a multiple of Hkv (GQA). causal requires T == S;
// window > 0 lets query t see keys (t - window, t]; softcap > 0 applies softcap*tanh(s/softcap)
// to the scaled scores. window requires causal.
struct AttentionParams {
  double scale = 1.0;
  bool causal = true;
  int64_t window = 0;
  double softcap = 0.0;
};
Tensor attention(Tensor q, Tensor k, Tensor v, const AttentionParams& params);

}  // namespace tessera
