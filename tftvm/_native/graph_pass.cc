// The pass behind tftvm.enable(): registered with TF's own graph optimization registry, it
// hands each graph TF is about to place (a tf.function, Keras predict/fit, a loaded
// SavedModel's signatures) to tftvm's Python pipeline, registered as the tvm-ffi global
// "tftvm.graph_pass", and puts back the graph it returns (clusters replaced by TvmCall nodes).
//
// Safety: nothing happens unless enabled; any failure leaves TF's graph as it was (the Python
// side logs and reports why); one graph at a time, and a graph that TF instantiates while
// the pipeline runs (on this or another thread) is left to TF rather than waited for, so the
// pipeline can never wait on itself.
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/common_runtime/optimization_registry.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/platform/logging.h"

namespace tftvm {
namespace {

std::atomic<bool> enabled{false};
std::mutex busy;  // held while the Python pipeline rewrites a graph

class GraphPass : public tensorflow::GraphOptimizationPass {
 public:
  absl::Status Run(const tensorflow::GraphOptimizationPassOptions& options) override {
    // Functions only: a TF1 session's graph names its feeds and fetches by node name.
    if (!enabled.load() || options.function_def == nullptr || options.graph == nullptr ||
        *options.graph == nullptr) {
      return absl::OkStatus();
    }
    std::unique_lock<std::mutex> lock(busy, std::try_to_lock);
    if (!lock.owns_lock()) return absl::OkStatus();  // a graph instantiated by the pipeline itself
    auto pipeline = tvm::ffi::Function::GetGlobal("tftvm.graph_pass");
    if (!pipeline.has_value()) return absl::OkStatus();
    tensorflow::GraphDef graph_def;
    (*options.graph)->ToGraphDef(&graph_def);
    if (options.flib_def != nullptr) {  // the functions it calls (Keras's step inside fit's loop)
      *graph_def.mutable_library() = options.flib_def->ReachableDefinitions(graph_def).ToProto();
    }
    std::string function_def = options.function_def->SerializeAsString();
    std::string rewritten;
    try {
      tvm::ffi::Bytes out = (*pipeline)(tvm::ffi::Bytes(graph_def.SerializeAsString()),
                                        tvm::ffi::Bytes(function_def))
                                .cast<tvm::ffi::Bytes>();
      rewritten = std::string(out.data(), out.size());
    } catch (const std::exception& err) {
      LOG(WARNING) << "tftvm: the graph runs in TF: " << err.what();
      return absl::OkStatus();
    }
    if (rewritten.empty()) return absl::OkStatus();  // nothing to offload
    tensorflow::GraphDef new_def;
    if (!new_def.ParseFromString(rewritten)) {
      LOG(WARNING) << "tftvm: the graph runs in TF: the rewritten graph does not parse";
      return absl::OkStatus();
    }
    // The functions the graph calls are in TF's library already; a new one (the branches of
    // a size switch's cond) is added to it.
    for (const tensorflow::FunctionDef& function : new_def.library().function()) {
      if (options.flib_def != nullptr && options.flib_def->Find(function.signature().name()) == nullptr) {
        absl::Status added = options.flib_def->AddFunctionDef(function);
        if (!added.ok()) {
          LOG(WARNING) << "tftvm: the graph runs in TF: " << added;
          return absl::OkStatus();
        }
      }
    }
    new_def.mutable_library()->Clear();
    auto graph = std::make_unique<tensorflow::Graph>(
        options.flib_def != nullptr
            ? static_cast<const tensorflow::OpRegistryInterface*>(options.flib_def)
            : tensorflow::OpRegistry::Global());
    tensorflow::GraphConstructorOptions construct;
    construct.allow_internal_ops = true;  // _Arg and _Retval
    absl::Status status = tensorflow::ConvertGraphDefToGraph(construct, std::move(new_def), graph.get());
    if (!status.ok()) {
      LOG(WARNING) << "tftvm: the graph runs in TF: " << status;
      return absl::OkStatus();
    }
    options.graph->swap(graph);
    return absl::OkStatus();
  }
};

}  // namespace

// Early, before TF's own pre-placement passes lower control flow or partition the graph.
REGISTER_OPTIMIZATION(tensorflow::OptimizationPassRegistry::PRE_PLACEMENT, 0, GraphPass);

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("tftvm.set_graph_pass_enabled", [](bool on) { enabled.store(on); })
      .def("tftvm.graph_pass_enabled", []() { return enabled.load(); });
}

}  // namespace tftvm
