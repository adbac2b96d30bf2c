// Graph: an arena of immutable, hash-consed nodes in topological order.
//
// Ops are added through the free functions of engine/ops.h; each returns a `Tensor` handle.
// Adding a node with the same op, attributes and inputs as an existing one returns the
// existing node. Constants are deduplicated by content (xxHash). Inputs are named and have a
// fixed capacity; outputs are named aliases of nodes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/ops.h"

namespace tessera {

using NodeId = int32_t;

struct Node {
  OpKind kind = OpKind::Input;
  DType dtype = DType::F32;
  Shape shape;
  absl::InlinedVector<NodeId, 3> inputs;
  OpAttrs attrs;          // always the alternative of `kind` (Graph checks it)
  int32_t constant = -1;  // index into Graph::constant_data for OpKind::Constant

  // The typed attributes; throws Error when the node is of another kind (a programming error,
  // never user input: rules and kernels only read the attributes of their own kind).
  template <class A>
  const A& attrs_as() const {
    static_assert(op_kind_of<A> != OpKind::Count, "not an attribute type of the op list");
    if (const A* a = std::get_if<A>(&attrs)) return *a;
    attrs_mismatch(op_kind_of<A>);
  }

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t volume() const { return shape_volume(shape); }
  int64_t size_bytes() const { return dtype_bytes(dtype, volume()); }

 private:
  [[noreturn]] void attrs_mismatch(OpKind wanted) const;
};

// Fetches what the engine's per-node walks read of a node (kind, dtype, shape, inputs, the start
// of the attributes and the attributes' discriminator at the end of their storage), not the
// rest of the storage sized for the largest attribute type (half of a Node's bytes).
inline void prefetch_node(const Node& node) {
  const char* p = reinterpret_cast<const char*>(&node);
  __builtin_prefetch(p);
  __builtin_prefetch(p + 64);
  __builtin_prefetch(p + 127);
  __builtin_prefetch(p + sizeof(Node) - 1);
}

// attrs_of<Conv2dAttrs>(node): the same as node.attrs_as<Conv2dAttrs>().
template <class A>
const A& attrs_of(const Node& node) {
  return node.attrs_as<A>();
}

class Graph;

// A handle to a node of a graph. Cheap to copy; valid while the graph lives.
struct Tensor {
  Graph* graph = nullptr;
  NodeId id = -1;

  const Node& node() const;
  const Shape& shape() const;
  DType dtype() const;
  int rank() const;
  int64_t dim(int axis) const;  // negative axes count from the end
};

// Read-only bytes of a constant; `owner` keeps external memory (e.g. a file mapping) alive.
struct ConstantData {
  const void* data = nullptr;
  int64_t size_bytes = 0;
  std::shared_ptr<const void> owner;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // A named input of fixed capacity. Values start at zero.
  Tensor input(std::string_view name, const Shape& shape, DType dtype);
  // A constant holding a copy of `bytes` (size must match shape and dtype).
  Tensor constant(const Shape& shape, DType dtype, std::span<const std::byte> bytes);
  // A constant over external memory kept alive by `owner` (no copy).
  Tensor constant_external(const Shape& shape, DType dtype, const void* data,
                           std::shared_ptr<const void> owner);
  Tensor constant(const Shape& shape, const std::vector<float>& values);
  Tensor scalar(float value, DType dtype = DType::F32);
  // Names a node as an output readable through GraphSession::read (`t` must be a node of this
  // graph). Sessions created before see only the outputs named before them.
  void output(std::string_view name, Tensor t);

  // Adds (or finds) a node of the kind of `attrs`; validates through the op's definition, and
  // that every input is a node of this graph and the result's element count and byte size fit
  // int64. Throws Error.
  Tensor add_node(std::span<const Tensor> inputs, OpAttrs attrs);
  // The same, checking that `attrs` belong to `kind`.
  Tensor add_node(OpKind kind, std::span<const Tensor> inputs, OpAttrs attrs);

  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  const Node& node(NodeId id) const { return nodes_[static_cast<size_t>(id)]; }
  const ConstantData& constant_data(int32_t index) const { return constants_[static_cast<size_t>(index)]; }
  NodeId find_input(std::string_view name) const;   // -1 when unknown
  NodeId find_output(std::string_view name) const;  // -1 when unknown
  const std::vector<NodeId>& inputs() const { return input_ids_; }
  const std::vector<std::pair<std::string, NodeId>>& outputs() const { return outputs_; }
  // 64-bit structural hash of the whole graph (xxHash).
  uint64_t structure_hash() const;
  // Per node: 1 when an output is the node or reads it (directly or through other nodes).
  std::vector<uint8_t> reaches_outputs() const;
  // A token that lives exactly as long as this graph. A GraphSession keeps a weak_ptr to it and
  // refuses to run (Error) once the graph it was created on is destroyed.
  std::weak_ptr<const void> liveness() const { return liveness_; }

 private:
  friend class GraphRollback;
  Tensor intern(Node node);
  // Removes every node, constant, input and output added after the graph had these counts.
  void truncate(int32_t nodes, size_t constants, size_t inputs, size_t outputs);
  Tensor add_constant(const Shape& shape, DType dtype, ConstantData data);

  std::vector<Node> nodes_;
  std::vector<uint64_t> hashes_;  // the by_hash_ key of each node
  std::vector<ConstantData> constants_;
  absl::flat_hash_map<uint64_t, absl::InlinedVector<NodeId, 1>> by_hash_;
  std::vector<NodeId> input_ids_;
  std::vector<std::pair<std::string, NodeId>> outputs_;
  std::shared_ptr<const void> liveness_ = std::make_shared<const int>(0);
};

// Makes a sequence of additions all-or-nothing: when the scope is left by an exception, every
// node, constant, input and output added to the graph since the GraphRollback was constructed is
// removed again (when it ends normally, nothing happens). Scopes nest. The builders that add
// more than one node (split, stack, decompositions) open one, so a builder that fails part-way
// leaves the graph exactly as it was, and the sessions created on it usable; callers assembling
// a larger piece of a graph can do the same.
class GraphRollback {
 public:
  explicit GraphRollback(Graph& graph);
  ~GraphRollback();
  GraphRollback(const GraphRollback&) = delete;
  GraphRollback& operator=(const GraphRollback&) = delete;

 private:
  Graph& graph_;
  int32_t nodes_;
  size_t constants_, inputs_, outputs_;
  int exceptions_;  // std::uncaught_exceptions() at construction
};

uint64_t node_hash(const Node& node, uint64_t constant_content_hash);

}  // namespace tessera
