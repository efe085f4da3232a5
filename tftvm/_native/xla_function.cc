#include "xla_function.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/graph_to_functiondef.h"
#include "tensorflow/core/framework/node_def.pb.h"

namespace tftvm {

namespace {

constexpr char kMustCompile[] = "_XlaMustCompile";

// The `_Arg` or `_Retval` nodes of `graph`, in index order.
std::vector<const tensorflow::Node*> ByIndex(const tensorflow::Graph& graph, const std::string& op) {
  std::vector<const tensorflow::Node*> nodes;
  for (const tensorflow::Node* node : graph.op_nodes()) {
    if (node->type_string() == op) nodes.push_back(node);
  }
  auto index = [](const tensorflow::Node* node) { return node->def().attr().at("index").i(); };
  std::sort(nodes.begin(), nodes.end(), [&](auto* a, auto* b) { return index(a) < index(b); });
  return nodes;
}

}  // namespace

bool MustCompileWithXla(const tensorflow::FunctionDef& function) {
  auto found = function.attr().find(kMustCompile);
  return found != function.attr().end() && found->second.b();
}

absl::StatusOr<tensorflow::GraphDef> CallCompiledByXla(const tensorflow::Graph& graph,
                                                       const tensorflow::FunctionDef& function,
                                                       tensorflow::FunctionLibraryDefinition* library) {
  std::unordered_set<std::string> control_outputs;
  for (const auto& [name, node] : function.control_ret()) control_outputs.insert(node);
  tensorflow::FunctionDef body;
  std::string body_name = library->UniqueFunctionName(absl::StrCat(function.signature().name(), "_xla_"));
  auto control_output = [&](const tensorflow::Node* node) -> std::optional<std::string> {
    if (control_outputs.count(node->name()) == 0) return std::nullopt;
    return node->name();
  };
  TF_RETURN_IF_ERROR(tensorflow::GraphToFunctionDef(graph, body_name, control_output, &body));
  (*body.mutable_attr())[kMustCompile].set_b(true);
  (*body.mutable_attr())["_noinline"].set_b(true);  // the call stays a call, for XLA to compile
  TF_RETURN_IF_ERROR(library->AddFunctionDef(body));

  tensorflow::GraphDef outer;
  *outer.mutable_versions() = graph.versions();
  std::unordered_set<std::string> taken(control_outputs);
  for (const tensorflow::Node* node : graph.op_nodes()) taken.insert(node->name());
  std::string call_name = "tftvm_xla_call";
  while (taken.count(call_name) != 0) call_name += "_";
  tensorflow::NodeDef call;
  call.set_name(call_name);
  call.set_op("StatefulPartitionedCall");
  tensorflow::AttrValue in_types, out_types;
  for (const tensorflow::Node* arg : ByIndex(graph, "_Arg")) {
    *outer.add_node() = arg->def();
    call.add_input(arg->name());
    in_types.mutable_list()->add_type(arg->def().attr().at("T").type());
  }
  for (const tensorflow::Node* result : ByIndex(graph, "_Retval")) {
    tensorflow::NodeDef* copy = outer.add_node();
    *copy = result->def();
    copy->clear_input();
    copy->add_input(absl::StrCat(call_name, ":", out_types.list().type_size()));
    out_types.mutable_list()->add_type(result->def().attr().at("T").type());
  }
  (*call.mutable_attr())["Tin"] = in_types;
  (*call.mutable_attr())["Tout"] = out_types;
  (*call.mutable_attr())["f"].mutable_func()->set_name(body_name);
  (*call.mutable_attr())[kMustCompile].set_b(true);
  (*call.mutable_attr())["config"].set_s("");
  (*call.mutable_attr())["config_proto"].set_s("");
  (*call.mutable_attr())["executor_type"].set_s("");
  *outer.add_node() = call;
  for (const std::string& name : control_outputs) {
    tensorflow::NodeDef* wait = outer.add_node();
    wait->set_name(name);
    wait->set_op("NoOp");
    wait->add_input(absl::StrCat("^", call_name));
  }
  return outer;
}

}  // namespace tftvm
