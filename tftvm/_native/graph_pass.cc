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
#include "xla_function.h"

namespace tftvm {
namespace {

std::atomic<bool> enabled{false};
std::mutex busy;  // held while the Python pipeline rewrites a graph

// What becomes of a jit_compile function (see enable_pass.py). Only reached while enable()
// has TF's jit_compile_rewrite on: TF then runs such a function's graph through the passes
// and its executor, not XLA, so this pass gives XLA back what TVM does not replace.
enum JitMode { kLeftToXla = 0, kTvmInsideXla = 1, kTvmReplacesXla = 2 };
std::atomic<int> jit_mode{kLeftToXla};

absl::StatusOr<std::unique_ptr<tensorflow::Graph>> ToGraph(tensorflow::GraphDef graph_def,
                                                           const tensorflow::FunctionLibraryDefinition* library) {
  auto graph = std::make_unique<tensorflow::Graph>(
      library != nullptr ? static_cast<const tensorflow::OpRegistryInterface*>(library)
                         : tensorflow::OpRegistry::Global());
  tensorflow::GraphConstructorOptions construct;
  construct.allow_internal_ops = true;  // _Arg and _Retval
  TF_RETURN_IF_ERROR(tensorflow::ConvertGraphDefToGraph(construct, std::move(graph_def), graph.get()));
  return graph;
}

// The graph with TVM's clusters as TvmCall nodes, or null where it stays as it is (nothing to
// offload, a failure, or the pipeline busy with another graph).
std::unique_ptr<tensorflow::Graph> Rewritten(const tensorflow::GraphOptimizationPassOptions& options) {
  std::unique_lock<std::mutex> lock(busy, std::try_to_lock);
  if (!lock.owns_lock()) return nullptr;  // a graph instantiated by the pipeline itself
  auto pipeline = tvm::ffi::Function::GetGlobal("tftvm.graph_pass");
  if (!pipeline.has_value()) return nullptr;
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
    return nullptr;
  }
  if (rewritten.empty()) return nullptr;  // nothing to offload
  tensorflow::GraphDef new_def;
  if (!new_def.ParseFromString(rewritten)) {
    LOG(WARNING) << "tftvm: the graph runs in TF: the rewritten graph does not parse";
    return nullptr;
  }
  // The functions the graph calls are in TF's library already; a new one (the branches of
  // a size switch's cond) is added to it.
  for (const tensorflow::FunctionDef& function : new_def.library().function()) {
    if (options.flib_def != nullptr && options.flib_def->Find(function.signature().name()) == nullptr) {
      absl::Status added = options.flib_def->AddFunctionDef(function);
      if (!added.ok()) {
        LOG(WARNING) << "tftvm: the graph runs in TF: " << added;
        return nullptr;
      }
    }
  }
  new_def.mutable_library()->Clear();
  auto graph = ToGraph(std::move(new_def), options.flib_def);
  if (!graph.ok()) {
    LOG(WARNING) << "tftvm: the graph runs in TF: " << graph.status();
    return nullptr;
  }
  return std::move(graph).value();
}

class GraphPass : public tensorflow::GraphOptimizationPass {
 public:
  absl::Status Run(const tensorflow::GraphOptimizationPassOptions& options) override {
    // Functions only: a TF1 session's graph names its feeds and fetches by node name.
    if (!enabled.load() || options.function_def == nullptr || options.graph == nullptr ||
        *options.graph == nullptr) {
      return absl::OkStatus();
    }
    std::unique_ptr<tensorflow::Graph> rewritten = Rewritten(options);
    int mode = jit_mode.load();
    bool to_xla = mode != kLeftToXla && options.flib_def != nullptr && MustCompileWithXla(*options.function_def) &&
                  (rewritten == nullptr || mode == kTvmInsideXla);
    if (to_xla) {
      const tensorflow::Graph& body = rewritten != nullptr ? *rewritten : **options.graph;
      absl::StatusOr<std::unique_ptr<tensorflow::Graph>> call = [&]() -> absl::StatusOr<std::unique_ptr<tensorflow::Graph>> {
        TF_ASSIGN_OR_RETURN(tensorflow::GraphDef call_def, CallCompiledByXla(body, *options.function_def, options.flib_def));
        return ToGraph(std::move(call_def), options.flib_def);
      }();
      if (call.ok()) {
        options.graph->swap(*call);
        return absl::OkStatus();
      }
      LOG(WARNING) << "tftvm: a jit_compile function runs without XLA: " << call.status();
    }
    if (rewritten != nullptr) options.graph->swap(rewritten);
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
      .def("tftvm.graph_pass_enabled", []() { return enabled.load(); })
      .def("tftvm.set_graph_pass_jit_mode", [](int mode) { jit_mode.store(mode); });
}

}  // namespace tftvm
