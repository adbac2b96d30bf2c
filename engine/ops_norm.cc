// PLACEHOLDER: to be replaced by the real definitions.
#include "engine/op_def.h"

namespace tessera {

const OpDef kRmsNormDef{.name = "rmsnorm", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("rmsnorm", "not implemented"); }};
const OpDef kLayerNormDef{.name = "layernorm", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("layernorm", "not implemented"); }};
const OpDef kGroupNormDef{.name = "groupnorm", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("groupnorm", "not implemented"); }};

}  // namespace tessera
