#include "engine/graph.h"

#include <cstddef>
#include <cstring>
#include <exception>
#include <tuple>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "xxhash.h"

namespace tessera {

const Node& Tensor::node() const {
  if (graph == nullptr || id < 0 || id >= graph->size()) throw Error("[graph] invalid tensor handle");
  return graph->node(id);
}
const Shape& Tensor::shape() const { return node().shape; }
DType Tensor::dtype() const { return node().dtype; }
int Tensor::rank() const { return node().rank(); }
int64_t Tensor::dim(int axis) const {
  int r = rank();
  if (axis < -r || axis >= r) throw Error(absl::StrCat("[graph] axis ", axis, " out of range for rank ", r));
  return shape()[static_cast<size_t>(axis < 0 ? axis + r : axis)];
}

void Node::attrs_mismatch(OpKind wanted) const {
  throw Error(absl::StrCat("[graph] a ", op_def(kind).name, " node has no ", op_def(wanted).name,
                           " attributes"));
}

namespace {

template <class T>
concept HasFields = requires(const T& value) { value.fields(); };
template <class T>
concept ListOfStructs = requires { typename T::value_type; } && HasFields<typename T::value_type>;

// Feeds one attribute field by value (never padding bytes): integers and enums as int64,
// bools as one byte, floats as double, structs with fields() field by field, lists and strings
// as their length then their elements.
template <class Feed, class T>
void feed_field(Feed& feed, const T& value) {
  if constexpr (HasFields<T>) {
    std::apply([&](const auto&... f) { (feed_field(feed, f), ...); }, value.fields());
  } else if constexpr (ListOfStructs<T>) {
    const uint64_t n = value.size();
    feed(&n, sizeof(n));
    for (const auto& element : value) feed_field(feed, element);
  } else if constexpr (std::is_same_v<T, bool>) {
    const uint8_t b = value ? 1 : 0;
    feed(&b, 1);
  } else if constexpr (std::is_enum_v<T> || std::is_integral_v<T>) {
    const auto v = static_cast<int64_t>(value);
    feed(&v, sizeof(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    const auto v = static_cast<double>(value);
    feed(&v, sizeof(v));
  } else {  // std::string or an InlinedVector of int64_t
    const uint64_t n = value.size();
    feed(&n, sizeof(n));
    feed(value.data(), value.size() * sizeof(value[0]));
  }
}

}  // namespace

std::vector<uint8_t> Graph::reaches_outputs() const {
  std::vector<uint8_t> reaches(nodes_.size(), 0);
  for (const auto& [name, id] : outputs_) reaches[static_cast<size_t>(id)] = 1;
  for (NodeId id = size() - 1; id >= 0; --id)
    if (reaches[static_cast<size_t>(id)])
      for (NodeId in : node(id).inputs) reaches[static_cast<size_t>(in)] = 1;
  return reaches;
}

uint64_t node_hash(const Node& node, uint64_t constant_content_hash) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  auto feed = [&](const void* p, size_t n) { XXH3_64bits_update(state, p, n); };
  uint8_t kind = static_cast<uint8_t>(node.kind), dtype = static_cast<uint8_t>(node.dtype);
  feed(&kind, 1);
  feed(&dtype, 1);
  feed(node.shape.data(), node.shape.size() * sizeof(int64_t));
  feed(node.inputs.data(), node.inputs.size() * sizeof(NodeId));
  std::visit([&](const auto& attrs) { std::apply([&](const auto&... f) { (feed_field(feed, f), ...); },
                                                   attrs.fields()); },
             node.attrs);
  feed(&constant_content_hash, sizeof(constant_content_hash));
  uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

// Every node passes here: rank, no negative dimension, and an element count and byte size that
// fit int64 (so no size computed from a node's shape can overflow later).
static void check_shape(std::string_view op, const Shape& shape, DType dtype) {
  if (shape.size() > kMaxRank) fail(op, absl::StrCat("rank ", shape.size(), " exceeds ", kMaxRank));
  for (int64_t d : shape)
    if (d < 0) fail(op, absl::StrCat("negative dimension in shape ", shape_string(shape)));
  check_shape_size(op, shape, dtype);
}

// `what` names the handle in messages ("tensor", "input 1").
static void check_handle(std::string_view op, const Graph& graph, Tensor t,
                         const std::string& what = "tensor") {
  if (t.graph == nullptr) fail(op, absl::StrCat(what, " is an empty tensor (Tensor{})"));
  if (t.graph != &graph) fail(op, absl::StrCat(what, " belongs to another graph"));
  if (t.id < 0 || t.id >= graph.size())
    fail(op, absl::StrCat(what, ": tensor handle %", t.id, " is not a node of its graph (", graph.size(), " nodes)"));
}

Tensor Graph::input(std::string_view name, const Shape& shape, DType dtype) {
  if (name.empty()) fail("input", "empty name");
  if (find_input(name) >= 0) fail("input", "duplicate input name '" + std::string(name) + "'");
  if (is_quantized(dtype)) fail("input", "inputs cannot be quantised");
  check_shape("input", shape, dtype);
  Node node;
  node.kind = OpKind::Input;
  node.dtype = dtype;
  node.shape = shape;
  node.attrs = InputAttrs{std::string(name)};
  Tensor t = intern(std::move(node));
  input_ids_.push_back(t.id);
  return t;
}

Tensor Graph::add_constant(const Shape& shape, DType dtype, ConstantData data) {
  check_shape("constant", shape, dtype);
  if (is_quantized(dtype) && (shape.empty() || shape.back() % dtype_block_size(dtype) != 0))
    fail("constant", absl::StrCat(dtype_name(dtype), " rows must be whole blocks of ", dtype_block_size(dtype),
                                  ", shape ", shape_string(shape)));
  if (data.size_bytes != dtype_bytes(dtype, shape_volume(shape)))
    fail("constant", absl::StrCat("got ", data.size_bytes, " bytes for shape ", shape_string(shape),
                                  " of ", dtype_name(dtype)));
  Node node;
  node.kind = OpKind::Constant;
  node.attrs = ConstantAttrs{};
  node.dtype = dtype;
  node.shape = shape;
  uint64_t content = XXH3_64bits(data.data, static_cast<size_t>(data.size_bytes));
  uint64_t h = node_hash(node, content);
  auto it = by_hash_.find(h);
  if (it != by_hash_.end())
    for (NodeId id : it->second) {
      const Node& other = nodes_[static_cast<size_t>(id)];
      const ConstantData& od = constants_[static_cast<size_t>(other.constant)];
      if (other.kind == OpKind::Constant && other.dtype == dtype && other.shape == shape &&
          std::memcmp(od.data, data.data, static_cast<size_t>(data.size_bytes)) == 0)
        return Tensor{this, id};
    }
  node.constant = static_cast<int32_t>(constants_.size());
  constants_.push_back(std::move(data));
  NodeId id = static_cast<NodeId>(nodes_.size());
  nodes_.push_back(std::move(node));
  hashes_.push_back(h);
  by_hash_[h].push_back(id);
  return Tensor{this, id};
}

Tensor Graph::constant(const Shape& shape, DType dtype, std::span<const std::byte> bytes) {
  auto copy = std::make_shared<std::vector<std::byte>>(bytes.begin(), bytes.end());
  ConstantData data{copy->data(), static_cast<int64_t>(copy->size()), copy};
  return add_constant(shape, dtype, std::move(data));
}

Tensor Graph::constant_external(const Shape& shape, DType dtype, const void* data,
                                std::shared_ptr<const void> owner) {
  ConstantData d{data, dtype_bytes(dtype, shape_volume(shape)), std::move(owner)};
  return add_constant(shape, dtype, std::move(d));
}

Tensor Graph::constant(const Shape& shape, const std::vector<float>& values) {
  return constant(shape, DType::F32, std::as_bytes(std::span<const float>(values)));
}

Tensor Graph::scalar(float value, DType dtype) {
  std::byte bytes[8] = {};
  switch (dtype) {
    case DType::F32: std::memcpy(bytes, &value, 4); break;
    case DType::F16: { uint16_t h = float_to_half(value); std::memcpy(bytes, &h, 2); break; }
    case DType::BF16: { uint16_t h = float_to_bf16(value); std::memcpy(bytes, &h, 2); break; }
    case DType::I32: { int32_t v = static_cast<int32_t>(value); std::memcpy(bytes, &v, 4); break; }
    case DType::I64: { int64_t v = static_cast<int64_t>(value); std::memcpy(bytes, &v, 8); break; }
    case DType::Bool: bytes[0] = std::byte{value != 0}; break;
    default: fail("constant", "a scalar cannot be quantised");
  }
  return constant(Shape{}, dtype, std::span<const std::byte>(bytes, static_cast<size_t>(dtype_size(dtype))));
}

void Graph::output(std::string_view name, Tensor t) {
  if (name.empty()) fail("output", "empty name");
  check_handle("output", *this, t);
  if (find_output(name) >= 0) fail("output", "duplicate output name '" + std::string(name) + "'");
  outputs_.emplace_back(std::string(name), t.id);
}

Tensor Graph::add_node(OpKind kind, std::span<const Tensor> inputs, OpAttrs attrs) {
  if (attrs_kind(attrs) != kind)
    fail(op_def(kind).name, absl::StrCat("given the attributes of ", op_def(attrs_kind(attrs)).name));
  return add_node(inputs, std::move(attrs));
}

Tensor Graph::add_node(std::span<const Tensor> inputs, OpAttrs attrs) {
  const OpKind kind = attrs_kind(attrs);
  const OpDef& def = op_def(kind);
  int n = static_cast<int>(inputs.size());
  if (n < def.min_inputs || n > def.max_inputs)
    fail(def.name, absl::StrCat("expects ", def.min_inputs, "..", def.max_inputs, " inputs, got ", n));
  Node node;
  node.kind = kind;
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_handle(def.name, *this, inputs[i], absl::StrCat("input ", i));
    node.inputs.push_back(inputs[i].id);
  }
  // Quantised values feed only the ops whose kernels dequantise them.
  for (const Tensor& t : inputs)
    if (is_quantized(t.dtype()) && kind != OpKind::Linear && kind != OpKind::Gather && kind != OpKind::Cast &&
        kind != OpKind::Attention)
      fail(def.name, absl::StrCat("does not accept quantised ", dtype_name(t.dtype()), " inputs"));
  def.infer(*this, node);
  check_shape(def.name, node.shape, node.dtype);
  return intern(std::move(node));
}

Tensor Graph::intern(Node node) {
  uint64_t h = node_hash(node, 0);
  auto& bucket = by_hash_[h];
  for (NodeId id : bucket) {
    const Node& other = nodes_[static_cast<size_t>(id)];
    if (other.kind == node.kind && other.dtype == node.dtype && other.shape == node.shape &&
        other.inputs == node.inputs && other.attrs == node.attrs && other.constant < 0)
      return Tensor{this, id};
  }
  NodeId id = static_cast<NodeId>(nodes_.size());
  nodes_.push_back(std::move(node));
  hashes_.push_back(h);
  bucket.push_back(id);
  return Tensor{this, id};
}

void Graph::truncate(int32_t nodes, size_t constants, size_t inputs, size_t outputs) {
  for (NodeId id = size() - 1; id >= nodes; --id) {
    auto it = by_hash_.find(hashes_[static_cast<size_t>(id)]);
    if (it == by_hash_.end()) continue;
    // Ids enter their bucket in increasing order, so a removed node is its bucket's last.
    if (!it->second.empty() && it->second.back() == id) it->second.pop_back();
    if (it->second.empty()) by_hash_.erase(it);
  }
  nodes_.erase(nodes_.begin() + nodes, nodes_.end());
  hashes_.erase(hashes_.begin() + nodes, hashes_.end());
  constants_.erase(constants_.begin() + static_cast<std::ptrdiff_t>(constants), constants_.end());
  input_ids_.erase(input_ids_.begin() + static_cast<std::ptrdiff_t>(inputs), input_ids_.end());
  outputs_.erase(outputs_.begin() + static_cast<std::ptrdiff_t>(outputs), outputs_.end());
}

GraphRollback::GraphRollback(Graph& graph)
    : graph_(graph),
      nodes_(graph.size()),
      constants_(graph.constants_.size()),
      inputs_(graph.input_ids_.size()),
      outputs_(graph.outputs_.size()),
      exceptions_(std::uncaught_exceptions()) {}

GraphRollback::~GraphRollback() {
  if (std::uncaught_exceptions() > exceptions_) graph_.truncate(nodes_, constants_, inputs_, outputs_);
}

NodeId Graph::find_input(std::string_view name) const {
  for (NodeId id : input_ids_)
    if (nodes_[static_cast<size_t>(id)].attrs_as<InputAttrs>().name == name) return id;
  return -1;
}

NodeId Graph::find_output(std::string_view name) const {
  for (const auto& [n, id] : outputs_)
    if (n == name) return id;
  return -1;
}

uint64_t Graph::structure_hash() const {
  uint64_t h = 0;
  for (const Node& n : nodes_) {
    uint64_t content = 0;
    if (n.constant >= 0) {
      const ConstantData& d = constants_[static_cast<size_t>(n.constant)];
      content = XXH3_64bits(d.data, static_cast<size_t>(d.size_bytes));
    }
    uint64_t nh = node_hash(n, content);
    h = XXH3_64bits_withSeed(&nh, sizeof(nh), h);
  }
  return h;
}

}  // namespace tessera
