// PLACEHOLDER: to be replaced by the real definitions.
#include "engine/op_def.h"

namespace tessera {

const OpDef kMatmulDef{.name = "matmul", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("matmul", "not implemented"); }};
const OpDef kGatherDef{.name = "gather", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("gather", "not implemented"); }};
const OpDef kTriangleDef{.name = "triangle", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("triangle", "not implemented"); }};
const OpDef kArangeDef{.name = "arange", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("arange", "not implemented"); }};
const OpDef kRandDef{.name = "rand", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("rand", "not implemented"); }};

}  // namespace tessera
