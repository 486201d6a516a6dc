#pragma once
// The decomposition of Recurrent (ONNX RNN / GRU / LSTM) for backends without its kernel (used by
// the shared legalize, expand_node, and by lower_recurrent at the head of the pipeline): the layer
// unrolled over its time steps into MatMuls, Narrows and elementwise ops.
#include <string>
#include <vector>

#include "rlx/graph.h"

namespace rlx::passes {

// The outputs (y, y_h and, for lstm, y_c) of Recurrent `op` on operands `in`, unrolled: the input
// projection of every step is one MatMul, then per step a MatMul of h with r^T and the cell's
// elementwise ops. `where` names the node in errors. rlx::Error when the sequence length is
// symbolic (bind it) or longer than Limits::max_unroll_steps.
std::vector<Value> expand_recurrent(Graph& g, const ops::Recurrent& op, const std::vector<Value>& in,
                                    const std::string& where);

}  // namespace rlx::passes
