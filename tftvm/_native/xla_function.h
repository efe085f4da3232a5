// A function's graph, compiled by XLA as a whole: the graph becomes the body of a new library
// function marked `_XlaMustCompile`, and the function's graph one call of it. enable()'s pass
// uses it for jit_compile functions, so that XLA still compiles what TVM did not take (and,
// with jit_compile="inside", TVM's clusters too, as custom calls).
#ifndef TFTVM_XLA_FUNCTION_H_
#define TFTVM_XLA_FUNCTION_H_

#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/graph/graph.h"

namespace tftvm {

// Does `function` ask for XLA (tf.function(jit_compile=True): attr `_XlaMustCompile`)?
bool MustCompileWithXla(const tensorflow::FunctionDef& function);

// The graph of a call of `graph`'s body, compiled by XLA: the body is added to `library` as a
// new function; `_Arg` and `_Retval` nodes keep their names, types and indices, and the
// function's control outputs (`function.control_ret`) become NoOps of the same names that
// wait for the call, so TF still finds them by name.
absl::StatusOr<tensorflow::GraphDef> CallCompiledByXla(const tensorflow::Graph& graph,
                                                       const tensorflow::FunctionDef& function,
                                                       tensorflow::FunctionLibraryDefinition* library);

}  // namespace tftvm

#endif  // TFTVM_XLA_FUNCTION_H_
