// PLACEHOLDER: to be replaced by the real definitions.
#include "engine/op_def.h"

namespace tessera {

const OpDef kReduceDef{.name = "reduce", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("reduce", "not implemented"); }};
const OpDef kCumsumDef{.name = "cumsum", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("cumsum", "not implemented"); }};
const OpDef kSoftmaxDef{.name = "softmax", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("softmax", "not implemented"); }};

}  // namespace tessera
