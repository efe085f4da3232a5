// What the TF kernel (tvm_call.cc) and the XLA kernel (xla_call.cc) of TvmCall share.
#pragma once

#include <dlpack/dlpack.h>
#include <tvm/ffi/any.h>

#include <string>
#include <vector>

#include "shape_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/types.pb.h"
#include "absl/status/status.h"

namespace tftvm {

// TF's dtype as DLPack's; false for dtypes TVM cannot take.
bool ToDLDataType(tensorflow::DataType dt, DLDataType* out);

// A scalar operand at `data` as TVM takes it, the same for the TF and the XLA kernel:
// integers as int64, floats as double, bool as bool; none for a dtype TVM cannot take.
tvm::ffi::AnyView ScalarArg(DLDataType dtype, const void* data);

// Counts a run of a TvmCall node, by TF's kernel or as XLA's custom call: which runtime ran
// the kernels (`tftvm.tvm_calls_run`), for enable()'s jit_compile modes and their tests.
void CountRun(bool under_xla);

// The parsed in_spec / out_spec attrs of a TvmCall node.
struct Specs {
  std::vector<TensorSpec> inputs, outputs;
  std::vector<std::string> var_names;
};

absl::Status ParseSpecs(const std::string& op_name, const std::string& in_spec,
                        const std::string& out_spec, Specs* specs);

// A TvmCall node's attrs, its specs parsed.
struct CallAttrs {
  std::string op_name, func_name, key, module;
  Specs specs;
};
absl::Status ReadCallAttrs(tensorflow::OpKernelConstruction* ctx, CallAttrs* attrs);

// " (with n=3, m=4)" for the bound shape variables, "" for none.
std::string BindingsToString(const Bindings& vars, const std::vector<std::string>& names);

}  // namespace tftvm
