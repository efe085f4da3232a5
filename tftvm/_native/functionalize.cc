// TF1 control flow (Enter, Merge, Switch, NextIteration, Exit, LoopCond: tf.while_loop and
// tf.cond with control flow v2 off, in many frozen graphs) made functional While and If
// nodes, by the pass XLA's bridge runs for the same reason: functional loops are single
// nodes, so the graph is acyclic and their bodies are functions, which tftvm's control-flow
// pipeline offloads as it does TF2's.
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <stdexcept>
#include <string>

#include "tensorflow/compiler/tf2xla/functionalize_control_flow.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/op.h"

namespace tftvm {
namespace {

// `serialized` (a GraphDef with its function library) with its TF1 control flow functional;
// the functions made for the loop bodies and branches join its library.
tvm::ffi::Bytes FunctionalizeControlFlow(tvm::ffi::Bytes serialized) {
  tensorflow::GraphDef graph_def;
  if (!graph_def.ParseFromString(std::string(serialized.data(), serialized.size()))) {
    throw std::invalid_argument("functionalize_control_flow: the GraphDef does not parse");
  }
  tensorflow::FunctionLibraryDefinition library(tensorflow::OpRegistry::Global(), graph_def.library());
  absl::Status status = tensorflow::FunctionalizeControlFlowForGraphDef(&graph_def, &library);
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
  *graph_def.mutable_library() = library.ToProto();
  return tvm::ffi::Bytes(graph_def.SerializeAsString());
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef().def("tftvm.functionalize_control_flow", FunctionalizeControlFlow);
}

}  // namespace tftvm
