// PLACEHOLDER: to be replaced by the real definitions.
#include "engine/op_def.h"

namespace tessera {

const OpDef kRopeDef{.name = "rope", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("rope", "not implemented"); }};
const OpDef kConv2dDef{.name = "conv2d", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("conv2d", "not implemented"); }};
const OpDef kPool2dDef{.name = "pool2d", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("pool2d", "not implemented"); }};
const OpDef kUpsampleDef{.name = "upsample", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("upsample", "not implemented"); }};
const OpDef kAttentionDef{.name = "attention", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("attention", "not implemented"); }};

}  // namespace tessera
