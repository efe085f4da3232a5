// TvmCall: the one TF op behind every tftvm op.
//
// Inputs and outputs are type lists; attrs name the TVM module (by key, plus the
// library bytes when the node lives in a graph), the function, and the shape
// specs (shape_spec.h). TF buffers are passed to TVM as DLTensors without copies,
// outputs are allocated by TF and written by TVM in place.
//
// A node with `memoize` keeps its last inputs and outputs and, called again on the very
// same input buffers, returns the outputs without running TVM: a computation from a
// model's weights alone (a batch norm's rsqrt(variance + eps) * scale) then runs once,
// not per call. Sound because TF never writes a buffer another tensor still holds:
// variable updates copy first where the buffer's refcount is not one (PrepareToUpdateVariable
// in training_op_helpers.h; AssignVariableOp likewise), and holding the inputs keeps that
// refcount up. So a buffer we hold still has the contents we computed from.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "module_registry.h"
#include "shape_spec.h"
#include "tf_threads.h"
#include "tvm_call.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tsl/platform/mutex.h"

namespace tftvm {

namespace {
std::atomic<int64_t> g_runs[2] = {0, 0};  // TvmCall runs: [0] TF's kernel, [1] XLA's custom call
}  // namespace

void CountRun(bool under_xla) { g_runs[under_xla ? 1 : 0].fetch_add(1, std::memory_order_relaxed); }

bool ToDLDataType(tensorflow::DataType dt, DLDataType* out) {
  switch (dt) {
    case tensorflow::DT_HALF: *out = {kDLFloat, 16, 1}; return true;
    case tensorflow::DT_BFLOAT16: *out = {kDLBfloat, 16, 1}; return true;
    case tensorflow::DT_FLOAT: *out = {kDLFloat, 32, 1}; return true;
    case tensorflow::DT_DOUBLE: *out = {kDLFloat, 64, 1}; return true;
    case tensorflow::DT_INT8: *out = {kDLInt, 8, 1}; return true;
    case tensorflow::DT_INT16: *out = {kDLInt, 16, 1}; return true;
    case tensorflow::DT_INT32: *out = {kDLInt, 32, 1}; return true;
    case tensorflow::DT_INT64: *out = {kDLInt, 64, 1}; return true;
    case tensorflow::DT_UINT8: *out = {kDLUInt, 8, 1}; return true;
    case tensorflow::DT_UINT16: *out = {kDLUInt, 16, 1}; return true;
    case tensorflow::DT_UINT32: *out = {kDLUInt, 32, 1}; return true;
    case tensorflow::DT_UINT64: *out = {kDLUInt, 64, 1}; return true;
    case tensorflow::DT_BOOL: *out = {kDLBool, 8, 1}; return true;
    default: return false;
  }
}

tvm::ffi::AnyView ScalarArg(DLDataType dtype, const void* data) {
  auto as = [data](auto zero) { return *static_cast<const decltype(zero)*>(data); };
  switch (dtype.code) {
    case kDLFloat:
      if (dtype.bits == 16) return static_cast<double>(static_cast<float>(as(Eigen::half())));
      if (dtype.bits == 32) return static_cast<double>(as(0.0f));
      if (dtype.bits == 64) return as(0.0);
      break;
    case kDLBfloat: return static_cast<double>(static_cast<float>(as(Eigen::bfloat16())));
    case kDLBool: return as(false);
    case kDLInt:
      if (dtype.bits == 8) return static_cast<int64_t>(as(int8_t()));
      if (dtype.bits == 16) return static_cast<int64_t>(as(int16_t()));
      if (dtype.bits == 32) return static_cast<int64_t>(as(int32_t()));
      if (dtype.bits == 64) return as(int64_t());
      break;
    case kDLUInt:
      if (dtype.bits == 8) return static_cast<int64_t>(as(uint8_t()));
      if (dtype.bits == 16) return static_cast<int64_t>(as(uint16_t()));
      if (dtype.bits == 32) return static_cast<int64_t>(as(uint32_t()));
      if (dtype.bits == 64) return static_cast<int64_t>(as(uint64_t()));
      break;
  }
  return tvm::ffi::AnyView();
}

absl::Status ParseSpecs(const std::string& op_name, const std::string& in_spec,
                        const std::string& out_spec, Specs* specs) {
  std::string error;
  std::vector<std::string> out_vars;
  if (!ParseSpec(in_spec, &specs->inputs, &specs->var_names, &error) ||
      !ParseSpec(out_spec, &specs->outputs, &out_vars, &error)) {
    return tensorflow::errors::InvalidArgument("tftvm op '", op_name, "': malformed shape spec: ", error);
  }
  if (out_vars.size() > specs->var_names.size()) specs->var_names = out_vars;
  return absl::OkStatus();
}

absl::Status ReadCallAttrs(tensorflow::OpKernelConstruction* ctx, CallAttrs* attrs) {
  std::string in_spec, out_spec;
  TF_RETURN_IF_ERROR(ctx->GetAttr("op_name", &attrs->op_name));
  TF_RETURN_IF_ERROR(ctx->GetAttr("func_name", &attrs->func_name));
  TF_RETURN_IF_ERROR(ctx->GetAttr("key", &attrs->key));
  TF_RETURN_IF_ERROR(ctx->GetAttr("module", &attrs->module));
  TF_RETURN_IF_ERROR(ctx->GetAttr("in_spec", &in_spec));
  TF_RETURN_IF_ERROR(ctx->GetAttr("out_spec", &out_spec));
  return ParseSpecs(attrs->op_name, in_spec, out_spec, &attrs->specs);
}

std::string BindingsToString(const Bindings& vars, const std::vector<std::string>& names) {
  std::string s;
  for (size_t v = 0; v < vars.size(); ++v) {
    if (!vars[v]) continue;
    s += (s.empty() ? " (with " : ", ") + names[v] + "=" + std::to_string(*vars[v]);
  }
  return s.empty() ? s : s + ")";
}

namespace {

using tensorflow::DataType;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;
namespace errors = tensorflow::errors;

constexpr uintptr_t kAlignment = 64;  // what TVM's generated code assumes
using Shape = absl::InlinedVector<int64_t, 6>;

// The value of a rank-0 integer tensor; nullopt for other tensors.
std::optional<int64_t> ScalarAsInt(const Tensor& t) {
  if (t.dims() != 0) return std::nullopt;
  switch (t.dtype()) {
    case tensorflow::DT_INT8: return t.scalar<int8_t>()();
    case tensorflow::DT_INT16: return t.scalar<int16_t>()();
    case tensorflow::DT_INT32: return t.scalar<int32_t>()();
    case tensorflow::DT_INT64: return t.scalar<int64_t>()();
    case tensorflow::DT_UINT8: return t.scalar<uint8_t>()();
    case tensorflow::DT_UINT16: return t.scalar<uint16_t>()();
    case tensorflow::DT_UINT32: return t.scalar<uint32_t>()();
    case tensorflow::DT_UINT64: return static_cast<int64_t>(t.scalar<uint64_t>()());
    default: return std::nullopt;
  }
}

absl::Status RankError(const std::string& op_name, int i, const TensorSpec& t,
                       const std::vector<std::string>& var_names, const std::string& got) {
  std::string want = t.scalar ? std::string("be a scalar (rank 0)")
                              : "have rank " + std::to_string(t.dims.size()) + ", shape " +
                                    ShapeToString(t, var_names);
  return errors::InvalidArgument("tftvm op '", op_name, "': argument '", t.name, "' (input ", i,
                                 ") must ", want, "; got shape ", got);
}

absl::Status TvmCallShape(InferenceContext* c) {
  std::string op_name, in_spec, out_spec;
  TF_RETURN_IF_ERROR(c->GetAttr("op_name", &op_name));
  TF_RETURN_IF_ERROR(c->GetAttr("in_spec", &in_spec));
  TF_RETURN_IF_ERROR(c->GetAttr("out_spec", &out_spec));
  Specs specs;
  TF_RETURN_IF_ERROR(ParseSpecs(op_name, in_spec, out_spec, &specs));
  if (static_cast<int>(specs.inputs.size()) != c->num_inputs() ||
      static_cast<int>(specs.outputs.size()) != c->num_outputs()) {
    return errors::InvalidArgument("tftvm op '", op_name, "': spec has ", specs.inputs.size(),
                                   " inputs and ", specs.outputs.size(), " outputs, node has ",
                                   c->num_inputs(), " and ", c->num_outputs());
  }
  Bindings vars(specs.var_names.size());
  for (int i = 0; i < c->num_inputs(); ++i) {
    const TensorSpec& t = specs.inputs[i];
    if (t.binds < 0) continue;
    const Tensor* value = c->input_tensor(i);  // known when TF can fold it to a constant
    std::optional<int64_t> v = value ? ScalarAsInt(*value) : std::nullopt;
    if (v) vars[t.binds] = *v;
  }
  for (int i = 0; i < c->num_inputs(); ++i) {
    const TensorSpec& t = specs.inputs[i];
    ShapeHandle s = c->input(i);
    if (c->RankKnown(s) && c->Rank(s) != static_cast<int>(t.dims.size())) {
      return RankError(op_name, i, t, specs.var_names, c->DebugString(s));
    }
    if (!c->RankKnown(s)) continue;
    for (size_t d = 0; d < t.dims.size(); ++d) {
      int v = LoneVar(t.dims[d]);
      DimensionHandle dim = c->Dim(s, d);
      if (v >= 0 && !vars[v] && c->ValueKnown(dim)) vars[v] = c->Value(dim);
    }
  }
  for (int i = 0; i < c->num_inputs(); ++i) {
    const TensorSpec& t = specs.inputs[i];
    ShapeHandle s = c->input(i);
    for (size_t d = 0; d < t.dims.size(); ++d) {
      std::optional<int64_t> want = Eval(t.dims[d], vars);
      if (c->RankKnown(s) && c->ValueKnown(c->Dim(s, d)) && want &&
          c->Value(c->Dim(s, d)) != *want) {
        return errors::InvalidArgument(
            "tftvm op '", op_name, "': argument '", t.name, "' (input ", i, ") must have shape ",
            ShapeToString(t, specs.var_names), BindingsToString(vars, specs.var_names),
            "; got shape ", c->DebugString(s));
      }
    }
  }
  for (int o = 0; o < c->num_outputs(); ++o) {
    std::vector<DimensionHandle> dims;
    for (const DimExpr& e : specs.outputs[o].dims) {
      std::optional<int64_t> value = Eval(e, vars);
      dims.push_back(value && *value >= 0 ? c->MakeDim(*value) : c->UnknownDim());
    }
    c->set_output(o, c->MakeShape(dims));
  }
  return absl::OkStatus();
}

// TVM's thread pool is per calling thread; size each one to TF's intra-op count.
std::atomic<int> g_max_tvm_threads{0};

void ConfigureTvmThreads(int tf_threads) {
  thread_local int configured = -1;
  if (configured == tf_threads || tf_threads <= 0) return;
  static const std::optional<tvm::ffi::Function> config =
      tvm::ffi::Function::GetGlobal("runtime.config_threadpool");
  static const std::optional<tvm::ffi::Function> num_threads =
      tvm::ffi::Function::GetGlobal("runtime.NumThreads");
  if (!config || !num_threads) return;  // TVM runtime not loaded: modules would not load either
  (*config)(1 /* kBig, TVM's default mode */, tf_threads);
  configured = tf_threads;
  int used = (*num_threads)().cast<int>();
  int seen = g_max_tvm_threads.load();
  while (used > seen && !g_max_tvm_threads.compare_exchange_weak(seen, used)) {
  }
}

class TvmCallOp : public OpKernel {
 public:
  explicit TvmCallOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    CallAttrs attrs;
    OP_REQUIRES_OK(ctx, ReadCallAttrs(ctx, &attrs));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("memoize", &memoize_));
    op_name_ = attrs.op_name;
    func_name_ = attrs.func_name;
    specs_ = std::move(attrs.specs);
    const std::string &key = attrs.key, &module_bytes = attrs.module;
    OP_REQUIRES(ctx,
                specs_.inputs.size() == static_cast<size_t>(ctx->num_inputs()) &&
                    specs_.outputs.size() == static_cast<size_t>(ctx->num_outputs()),
                errors::InvalidArgument("tftvm op '", op_name_, "': spec does not match arity"));
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      DLDataType dl;
      OP_REQUIRES(ctx, ToDLDataType(ctx->input_type(i), &dl),
                  errors::InvalidArgument("tftvm op '", op_name_, "': input ", i, " has dtype ",
                                          tensorflow::DataTypeString(ctx->input_type(i)),
                                          " which TVM cannot take"));
      in_dtypes_.push_back(dl);
    }
    for (int o = 0; o < ctx->num_outputs(); ++o) {
      DLDataType dl;
      OP_REQUIRES(ctx, ToDLDataType(ctx->output_type(o), &dl),
                  errors::InvalidArgument("tftvm op '", op_name_, "': output ", o, " has dtype ",
                                          tensorflow::DataTypeString(ctx->output_type(o)),
                                          " which TVM cannot produce"));
      out_dtypes_.push_back(dl);
    }
    if (key.rfind(ModuleRegistry::kFunctionKeyPrefix, 0) == 0) {
      func_ = ModuleRegistry::Global().GetFunction(key);
      OP_REQUIRES(ctx, func_.has_value(),
                  errors::NotFound("tftvm op '", op_name_, "': its tvm-ffi function is not registered "
                                   "in this process. An op made from a tvm_ffi.Function lives in the "
                                   "process that made it; to save or ship it, build a library "
                                   "(tvm_ffi.cpp.build) and make the op with tftvm.load_op."));
      return;
    }
    try {
      module_ = ModuleRegistry::Global().Get(key, module_bytes);
      tvm::ffi::Optional<tvm::ffi::Function> f = module_.value()->GetFunction(func_name_, true);
      if (f.has_value()) func_ = f.value();
    } catch (const EmbeddedModulesRefused& e) {
      ctx->CtxFailure(errors::PermissionDenied("tftvm op '", op_name_, "': ", e.what()));
      return;
    } catch (const std::exception& e) {
      ctx->CtxFailure(errors::NotFound("tftvm op '", op_name_, "': ", e.what()));
      return;
    }
    OP_REQUIRES(ctx, func_.has_value(),
                errors::NotFound("tftvm op '", op_name_, "': the TVM module has no function '",
                                 func_name_, "'"));
  }

  void Compute(OpKernelContext* ctx) override {
    CountRun(false);
    if (memoize_ && ReplayMemo(ctx)) return;
    Run(ctx);
    if (memoize_ && ctx->status().ok()) KeepMemo(ctx);
  }

 private:
  // The outputs of the last call, where this call's inputs are its very buffers.
  bool ReplayMemo(OpKernelContext* ctx) {
    tsl::mutex_lock lock(memo_mu_);
    if (memo_outputs_.empty()) return false;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& x = ctx->input(i);
      const Tensor& kept = memo_inputs_[i];
      bool same = x.NumElements() == 0 ? kept.shape() == x.shape()
                                       : x.SharesBufferWith(kept) && x.shape() == kept.shape() &&
                                             x.tensor_data().data() == kept.tensor_data().data();
      if (!same) return false;
    }
    for (int o = 0; o < ctx->num_outputs(); ++o) ctx->set_output(o, memo_outputs_[o]);
    return true;
  }

  void KeepMemo(OpKernelContext* ctx) {
    tsl::mutex_lock lock(memo_mu_);
    memo_inputs_.clear();
    memo_outputs_.clear();
    for (int i = 0; i < ctx->num_inputs(); ++i) memo_inputs_.push_back(ctx->input(i));
    for (int o = 0; o < ctx->num_outputs(); ++o) memo_outputs_.push_back(*ctx->mutable_output(o));
  }

  void Run(OpKernelContext* ctx) {
    const int n_in = ctx->num_inputs(), n_out = ctx->num_outputs();
    Bindings vars(specs_.var_names.size());
    OP_REQUIRES_OK(ctx, CheckInputs(ctx, &vars));

    // Inline storage: a call allocates nothing on the heap for up to 8 tensors.
    absl::InlinedVector<DLTensor, 8> dl(n_in + n_out);
    absl::InlinedVector<Shape, 8> shapes(n_in + n_out);
    absl::InlinedVector<Tensor, 8> aligned_copies;  // only for misaligned views
    aligned_copies.reserve(n_in + n_out);           // keeps pointers into it stable
    for (int i = 0; i < n_in; ++i) {
      const Tensor& t = ctx->input(i);
      if (specs_.inputs[i].scalar) continue;  // passed by value below
      const char* data = t.tensor_data().data();
      if (t.NumElements() > 0 && reinterpret_cast<uintptr_t>(data) % kAlignment != 0) {
        aligned_copies.emplace_back();
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(t.dtype(), t.shape(), &aligned_copies.back()));
        std::memcpy(const_cast<char*>(aligned_copies.back().tensor_data().data()), data,
                    t.TotalBytes());
        data = aligned_copies.back().tensor_data().data();
      }
      Fill(&dl[i], &shapes[i], t, data, in_dtypes_[i]);
    }
    // TVM runs a reduction's init inside its loop, so over an empty axis it
    // would leave the output unwritten: give such calls zeroed outputs.
    bool any_empty_input = false;
    for (int i = 0; i < n_in; ++i) any_empty_input |= ctx->input(i).NumElements() == 0;
    absl::InlinedVector<std::pair<Tensor*, Tensor*>, 2> copy_back;  // (output, aligned temp)
    for (int o = 0; o < n_out; ++o) {
      TensorShape shape;
      for (size_t d = 0; d < specs_.outputs[o].dims.size(); ++d) {
        std::optional<int64_t> v = Eval(specs_.outputs[o].dims[d], vars);
        OP_REQUIRES(ctx, v && *v >= 0,
                    errors::InvalidArgument(
                        "tftvm op '", op_name_, "': output '", specs_.outputs[o].name,
                        "' dim ", d, " = ", DimToString(specs_.outputs[o].dims[d], specs_.var_names),
                        " is not a valid size", BindingsToString(vars, specs_.var_names)));
        OP_REQUIRES_OK(ctx, shape.AddDimWithStatus(*v));
      }
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(o, shape, &out));
      const char* data = out->tensor_data().data();
      if (out->NumElements() > 0 && reinterpret_cast<uintptr_t>(data) % kAlignment != 0) {
        aligned_copies.emplace_back();
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(out->dtype(), shape, &aligned_copies.back()));
        copy_back.emplace_back(out, &aligned_copies.back());
        data = aligned_copies.back().tensor_data().data();
      }
      if (any_empty_input) std::memset(const_cast<char*>(data), 0, out->TotalBytes());
      Fill(&dl[n_in + o], &shapes[n_in + o], *out, data, out_dtypes_[o]);
    }

    ConfigureTvmThreads(ctx->device()->tensorflow_cpu_worker_threads()->num_threads);
    absl::InlinedVector<tvm::ffi::AnyView, 8> args;
    for (int i = 0; i < n_in + n_out; ++i) {
      bool scalar = i < n_in && specs_.inputs[i].scalar;
      args.push_back(scalar ? ScalarArg(in_dtypes_[i], ctx->input(i).data()) : tvm::ffi::AnyView(&dl[i]));
    }
    tvm::ffi::Any result;
    ParallelScope on_tf_threads(ctx->device()->tensorflow_cpu_worker_threads()->workers);
    try {
      func_->CallPacked(args.data(), static_cast<int32_t>(args.size()), &result);
    } catch (const tvm::ffi::Error& e) {
      std::string msg = "tftvm op '" + op_name_ + "': TVM function '" + func_name_ +
                        "' failed: " + e.kind() + ": " + e.message();
      bool user_error = e.kind() == "ValueError" || e.kind() == "TypeError" ||
                        e.kind() == "IndexError";
      ctx->CtxFailure(user_error ? errors::InvalidArgument(msg) : errors::Internal(msg));
      return;
    } catch (const std::exception& e) {
      ctx->CtxFailure(errors::Internal("tftvm op '", op_name_, "': TVM function '", func_name_,
                                       "' failed: ", e.what()));
      return;
    }
    for (auto& [out, tmp] : copy_back) {
      std::memcpy(const_cast<char*>(out->tensor_data().data()), tmp->tensor_data().data(),
                  out->TotalBytes());
    }
  }

  absl::Status CheckInputs(OpKernelContext* ctx, Bindings* vars) const {
    for (int i = 0; i < ctx->num_inputs(); ++i) {  // a scalar's value is what its variable is
      const TensorSpec& t = specs_.inputs[i];
      if (t.binds >= 0 && ctx->input(i).dims() == 0) (*vars)[t.binds] = ScalarAsInt(ctx->input(i));
    }
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const TensorSpec& t = specs_.inputs[i];
      const Tensor& x = ctx->input(i);
      if (x.dims() != static_cast<int>(t.dims.size())) {
        return RankError(op_name_, i, t, specs_.var_names, x.shape().DebugString());
      }
      for (size_t d = 0; d < t.dims.size(); ++d) {
        int v = LoneVar(t.dims[d]);
        if (v >= 0 && !(*vars)[v]) (*vars)[v] = x.dim_size(d);
      }
    }
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const TensorSpec& t = specs_.inputs[i];
      const Tensor& x = ctx->input(i);
      for (size_t d = 0; d < t.dims.size(); ++d) {
        std::optional<int64_t> want = Eval(t.dims[d], *vars);
        if (!want || *want != x.dim_size(d)) {
          return errors::InvalidArgument(
              "tftvm op '", op_name_, "': argument '", t.name, "' (input ", i,
              ") must have shape ", ShapeToString(t, specs_.var_names),
              BindingsToString(*vars, specs_.var_names), "; got shape ", x.shape().DebugString());
        }
      }
    }
    return absl::OkStatus();
  }

  static void Fill(DLTensor* dl, Shape* shape, const Tensor& t, const char* data,
                   DLDataType dtype) {
    // Zero-size tensors may have no buffer; TVM still wants a non-null pointer.
    alignas(kAlignment) static char empty[kAlignment];
    shape->resize(t.dims());
    for (int d = 0; d < t.dims(); ++d) (*shape)[d] = t.dim_size(d);
    dl->data = t.NumElements() > 0 ? const_cast<char*>(data) : empty;
    dl->device = {kDLCPU, 0};
    dl->ndim = t.dims();
    dl->dtype = dtype;
    dl->shape = shape->data();
    dl->strides = nullptr;
    dl->byte_offset = 0;
  }

  std::string op_name_, func_name_;
  Specs specs_;
  std::vector<DLDataType> in_dtypes_, out_dtypes_;
  std::optional<tvm::ffi::Module> module_;
  std::optional<tvm::ffi::Function> func_;
  bool memoize_ = false;
  tsl::mutex memo_mu_;
  std::vector<Tensor> memo_inputs_, memo_outputs_;  // held: TF will not write these buffers
};

}  // namespace

REGISTER_OP("TvmCall")
    .Input("args: Tin")
    .Output("results: Tout")
    .Attr("Tin: list(type) >= 0")
    .Attr("Tout: list(type) >= 1")
    .Attr("key: string")
    .Attr("func_name: string")
    .Attr("op_name: string")
    .Attr("in_spec: string")
    .Attr("out_spec: string")
    .Attr("module: string = ''")
    .Attr("memoize: bool = false")
    .SetShapeFn(TvmCallShape)
    .Doc(R"doc(
Calls a compiled TVM function on TF buffers (zero copy). Built by tftvm.op().
key: SHA-256 of the TVM library bytes.
module: the library bytes, embedded when the node is part of a graph.
memoize: return the last outputs when called again on the same input buffers.
)doc");

REGISTER_KERNEL_BUILDER(Name("TvmCall").Device(tensorflow::DEVICE_CPU), TvmCallOp);

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("tftvm.register_module",
           [](tvm::ffi::String key, tvm::ffi::Module module, tvm::ffi::String path) {
             UseTfThreads(std::string(path));
             ModuleRegistry::Global().Register(std::string(key), module);
           })
      .def("tftvm.register_function",
           [](tvm::ffi::String key, tvm::ffi::Function function) {
             ModuleRegistry::Global().RegisterFunction(std::string(key), function);
           })
      .def("tftvm.set_module_dir",
           [](tvm::ffi::String dir) { ModuleRegistry::Global().SetModuleDir(std::string(dir)); })
      .def("tftvm.allow_embedded_modules",
           [](bool allowed) { ModuleRegistry::Global().AllowEmbedded(allowed); })
      .def("tftvm.embedded_modules_allowed",
           []() { return ModuleRegistry::Global().EmbeddedAllowed(); })
      .def("tftvm.num_modules", []() -> int64_t {
        return static_cast<int64_t>(ModuleRegistry::Global().size());
      })
      .def("tftvm.max_tvm_threads", []() -> int64_t { return g_max_tvm_threads.load(); })
      .def("tftvm.tvm_calls_run", [](bool under_xla) -> int64_t { return g_runs[under_xla ? 1 : 0].load(); })
      .def("tftvm.max_loop_threads", []() -> int64_t { return MaxLoopThreads(); });
}

}  // namespace tftvm
