// TvmCall under XLA (tf.function(jit_compile=True), Keras' jit_compile, auto-clustering).
//
// The XLA kernel of TvmCall emits one custom call, target "tftvm_call", typed FFI: XLA
// hands the handler below its operand and result buffers, and the handler calls the same
// tvm-ffi function the TF kernel calls, on those buffers (no copies unless misaligned).
// XLA shapes are static, so output shapes come from the node's shape spec at compile time;
// a dim set by a scalar input's value needs that scalar to be a compile-time constant. The
// module is registered by its key when the node compiles (same registry and trust rules as
// the TF kernel), and the custom call carries the key and function name as attributes.
//
// GPU (not built here): the same handler registered for platform "CUDA" would take
// ffi::PlatformStream<cudaStream_t> and set it as TVM's stream (TVMFFIEnvSetStream) before
// the call, so TVM's kernels run on XLA's stream.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "module_registry.h"
#include "shape_spec.h"
#include "tensorflow/compiler/tf2xla/type_util.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tvm_call.h"
#include "xla/ffi/api/ffi.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"

namespace xla::ffi {
const XLA_FFI_Api* GetXlaFfiApi();  // exported by libtensorflow_cc; its header needs LLVM's
}  // namespace xla::ffi

namespace tftvm {
namespace {

namespace ffi = xla::ffi;
namespace errors = tensorflow::errors;
constexpr char kTarget[] = "tftvm_call";
constexpr uintptr_t kAlignment = 64;

// --- the handler: runs when the compiled XLA program runs -------------------------------

bool ToDL(ffi::DataType t, DLDataType* out) {
  switch (t) {
    case ffi::DataType::F16: *out = {kDLFloat, 16, 1}; return true;
    case ffi::DataType::BF16: *out = {kDLBfloat, 16, 1}; return true;
    case ffi::DataType::F32: *out = {kDLFloat, 32, 1}; return true;
    case ffi::DataType::F64: *out = {kDLFloat, 64, 1}; return true;
    case ffi::DataType::S8: *out = {kDLInt, 8, 1}; return true;
    case ffi::DataType::S16: *out = {kDLInt, 16, 1}; return true;
    case ffi::DataType::S32: *out = {kDLInt, 32, 1}; return true;
    case ffi::DataType::S64: *out = {kDLInt, 64, 1}; return true;
    case ffi::DataType::U8: *out = {kDLUInt, 8, 1}; return true;
    case ffi::DataType::U16: *out = {kDLUInt, 16, 1}; return true;
    case ffi::DataType::U32: *out = {kDLUInt, 32, 1}; return true;
    case ffi::DataType::U64: *out = {kDLUInt, 64, 1}; return true;
    case ffi::DataType::PRED: *out = {kDLBool, 8, 1}; return true;
    default: return false;
  }
}

// key + function name -> the function, looked up once per process.
std::optional<tvm::ffi::Function> FindFunction(std::string_view key, std::string_view func) {
  static std::mutex mu;
  static std::unordered_map<std::string, tvm::ffi::Function> found;
  std::string id = std::string(key) + "/" + std::string(func);
  std::lock_guard<std::mutex> lock(mu);
  auto it = found.find(id);
  if (it != found.end()) return it->second;
  std::optional<tvm::ffi::Function> f;
  if (key.rfind(ModuleRegistry::kFunctionKeyPrefix, 0) == 0) {
    f = ModuleRegistry::Global().GetFunction(std::string(key));
  } else {
    tvm::ffi::Module module = ModuleRegistry::Global().Get(std::string(key), "");
    tvm::ffi::Optional<tvm::ffi::Function> g = module->GetFunction(std::string(func), true);
    if (g.has_value()) f = g.value();
  }
  if (f) found.emplace(id, *f);
  return f;
}

struct Aligned {  // a 64-byte aligned copy of a misaligned buffer
  std::unique_ptr<char, decltype(&std::free)> data{nullptr, &std::free};
};

ffi::Error Call(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view key,
                std::string_view func, std::string_view op, std::string_view scalars) {
  CountRun(true);
  std::string where = "tftvm op '" + std::string(op) + "'";
  std::optional<tvm::ffi::Function> f;
  try {
    f = FindFunction(key, func);
  } catch (const std::exception& e) {
    return ffi::Error(ffi::ErrorCode::kNotFound, where + ": " + e.what());
  }
  if (!f) return ffi::Error(ffi::ErrorCode::kNotFound, where + ": no function '" + std::string(func) + "'");
  const size_t n_in = args.size(), n_out = rets.size();
  std::vector<DLTensor> dl(n_in + n_out);
  std::vector<tvm::ffi::AnyView> values(n_in + n_out);
  std::vector<Aligned> copies(n_in + n_out);
  std::vector<std::pair<void*, size_t>> copy_back(n_out, {nullptr, 0});
  bool any_empty_input = false;
  auto fill = [&](size_t i, const ffi::AnyBuffer& b, bool output) -> std::optional<ffi::Error> {
    DLDataType dtype;
    if (!ToDL(b.element_type(), &dtype)) {
      return ffi::Error(ffi::ErrorCode::kInvalidArgument, where + ": an operand dtype TVM cannot take");
    }
    void* data = b.untyped_data();
    size_t bytes = b.size_bytes();
    if (bytes > 0 && reinterpret_cast<uintptr_t>(data) % kAlignment != 0) {
      copies[i].data.reset(static_cast<char*>(std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment)));
      if (!output) std::memcpy(copies[i].data.get(), data, bytes);
      if (output) copy_back[i - n_in] = {data, bytes};
      data = copies[i].data.get();
    }
    alignas(kAlignment) static char empty[kAlignment];
    auto dims = b.dimensions();
    dl[i] = DLTensor{bytes > 0 ? data : empty, {kDLCPU, 0}, static_cast<int32_t>(dims.size()), dtype,
                     const_cast<int64_t*>(dims.begin()), nullptr, 0};
    if (output && any_empty_input) std::memset(data, 0, bytes);  // as the TF kernel does
    values[i] = tvm::ffi::AnyView(&dl[i]);
    return std::nullopt;
  };
  for (size_t i = 0; i < n_in; ++i) {
    auto b = args.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return ffi::Error(ffi::ErrorCode::kInternal, where + ": operand " + std::to_string(i));
    if (i < scalars.size() && scalars[i] == '1') {
      DLDataType dtype;
      if (!ToDL(b->element_type(), &dtype)) {
        return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                          where + ": operand " + std::to_string(i) + " has a dtype TVM cannot take");
      }
      values[i] = ScalarArg(dtype, b->untyped_data());
      continue;
    }
    any_empty_input |= b->element_count() == 0;
    if (auto err = fill(i, *b, false)) return *err;
  }
  for (size_t o = 0; o < n_out; ++o) {
    auto b = rets.get<ffi::AnyBuffer>(o);
    if (!b.has_value()) return ffi::Error(ffi::ErrorCode::kInternal, where + ": result " + std::to_string(o));
    if (auto err = fill(n_in + o, **b, true)) return *err;
  }
  tvm::ffi::Any result;
  try {
    f->CallPacked(values.data(), static_cast<int32_t>(values.size()), &result);
  } catch (const tvm::ffi::Error& e) {
    bool user = e.kind() == "ValueError" || e.kind() == "TypeError" || e.kind() == "IndexError";
    return ffi::Error(user ? ffi::ErrorCode::kInvalidArgument : ffi::ErrorCode::kInternal,
                      where + ": TVM function '" + std::string(func) + "' failed: " + e.kind() + ": " + e.message());
  } catch (const std::exception& e) {
    return ffi::Error(ffi::ErrorCode::kInternal, where + ": " + e.what());
  }
  for (size_t o = 0; o < n_out; ++o) {
    if (copy_back[o].first) std::memcpy(copy_back[o].first, copies[n_in + o].data.get(), copy_back[o].second);
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER(kTvmCallHandler, Call,
                       ffi::Ffi::Bind()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<std::string_view>("key")
                           .Attr<std::string_view>("func")
                           .Attr<std::string_view>("op")
                           .Attr<std::string_view>("scalars"));
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kTarget, "Host", kTvmCallHandler);

// --- the XLA kernel: runs when TF compiles a cluster with XLA ----------------------------

// `s` as a string attribute in the MLIR dictionary syntax of the custom call's config.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

class TvmCallXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit TvmCallXlaOp(tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    CallAttrs attrs;
    OP_REQUIRES_OK(ctx, ReadCallAttrs(ctx, &attrs));
    op_name_ = attrs.op_name;
    func_name_ = attrs.func_name;
    key_ = attrs.key;
    specs_ = std::move(attrs.specs);
    const std::string& module_bytes = attrs.module;
    // The handler finds the module by key: load it now, as the TF kernel would.
    try {
      if (key_.rfind(ModuleRegistry::kFunctionKeyPrefix, 0) == 0) {
        OP_REQUIRES(ctx, ModuleRegistry::Global().GetFunction(key_).has_value(),
                    errors::NotFound("tftvm op '", op_name_, "': its tvm-ffi function is not registered in this process"));
      } else {
        ModuleRegistry::Global().Get(key_, module_bytes);
      }
    } catch (const EmbeddedModulesRefused& e) {
      ctx->CtxFailure(errors::PermissionDenied("tftvm op '", op_name_, "': ", e.what()));
    } catch (const std::exception& e) {
      ctx->CtxFailure(errors::NotFound("tftvm op '", op_name_, "': ", e.what()));
    }
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const int n_in = ctx->num_inputs(), n_out = ctx->num_outputs();
    Bindings vars(specs_.var_names.size());
    std::string scalars(n_in, '0');
    for (int i = 0; i < n_in; ++i) {
      const TensorSpec& t = specs_.inputs[i];
      if (t.scalar) scalars[i] = '1';
      if (t.binds < 0) continue;
      int64_t value;
      OP_REQUIRES_OK(ctx, ctx->ConstantInputAsIntScalar(i, &value).ok()
                              ? absl::OkStatus()
                              : errors::InvalidArgument(
                                    "tftvm op '", op_name_, "': under XLA, scalar argument '", t.name,
                                    "' sets the size ", specs_.var_names[t.binds],
                                    " and must be a compile-time constant"));
      vars[t.binds] = value;
    }
    for (int i = 0; i < n_in; ++i) {
      const TensorSpec& t = specs_.inputs[i];
      tensorflow::TensorShape shape = ctx->InputShape(i);
      OP_REQUIRES(ctx, shape.dims() == static_cast<int>(t.dims.size()),
                  errors::InvalidArgument("tftvm op '", op_name_, "': argument '", t.name, "' (input ", i,
                                          ") must have rank ", t.dims.size(), "; got shape ", shape.DebugString()));
      for (size_t d = 0; d < t.dims.size(); ++d) {
        int v = LoneVar(t.dims[d]);
        if (v >= 0 && !vars[v]) vars[v] = shape.dim_size(d);
      }
    }
    for (int i = 0; i < n_in; ++i) {
      const TensorSpec& t = specs_.inputs[i];
      tensorflow::TensorShape shape = ctx->InputShape(i);
      for (size_t d = 0; d < t.dims.size(); ++d) {
        std::optional<int64_t> want = Eval(t.dims[d], vars);
        OP_REQUIRES(ctx, want && *want == shape.dim_size(d),
                    errors::InvalidArgument("tftvm op '", op_name_, "': argument '", t.name, "' (input ", i,
                                            ") must have shape ", ShapeToString(t, specs_.var_names),
                                            BindingsToString(vars, specs_.var_names), "; got shape ",
                                            shape.DebugString()));
      }
    }
    std::vector<xla::Shape> shapes;
    for (int o = 0; o < n_out; ++o) {
      std::vector<int64_t> dims;
      for (size_t d = 0; d < specs_.outputs[o].dims.size(); ++d) {
        std::optional<int64_t> v = Eval(specs_.outputs[o].dims[d], vars);
        OP_REQUIRES(ctx, v && *v >= 0,
                    errors::InvalidArgument("tftvm op '", op_name_, "': output '", specs_.outputs[o].name,
                                            "' dim ", d, " is not known at compile time",
                                            BindingsToString(vars, specs_.var_names)));
        dims.push_back(*v);
      }
      xla::PrimitiveType type;
      OP_REQUIRES_OK(ctx, tensorflow::DataTypeToPrimitiveType(ctx->expected_output_dtype(o), &type));
      shapes.push_back(xla::ShapeUtil::MakeShape(type, dims));
    }
    std::vector<xla::XlaOp> operands;
    for (int i = 0; i < n_in; ++i) operands.push_back(ctx->Input(i));
    std::string config = "{key = " + Quoted(key_) + ", func = " + Quoted(func_name_) + ", op = " +
                         Quoted(op_name_) + ", scalars = " + Quoted(scalars) + "}";
    xla::Shape shape = n_out == 1 ? shapes[0] : xla::ShapeUtil::MakeTupleShape(shapes);
    xla::XlaOp call = xla::CustomCall(ctx->builder(), kTarget, operands, shape, config,
                                      /*has_side_effect=*/false, /*output_operand_aliasing=*/{},
                                      /*literal=*/nullptr, xla::CustomCallSchedule::SCHEDULE_NONE,
                                      xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
    for (int o = 0; o < n_out; ++o) ctx->SetOutput(o, n_out == 1 ? call : xla::GetTupleElement(call, o));
  }

 private:
  std::string op_name_, func_name_, key_;
  Specs specs_;
};

// XLA builds its compilation kernels once per process, from the XLA ops registered by then
// (XlaOpRegistry::RegisterCompilationKernels, run when TF creates its devices). Where that
// happened before this library loaded (a tensor made before the first tftvm op), TvmCall's
// XLA kernel is registered on XLA's CPU compilation device by hand.
bool RegisterLate() {
  tensorflow::XlaOpRegistry::RegisterCompilationKernels();  // does nothing where it ran already
  if (tensorflow::KernelsRegisteredForOp("TvmCall").find(tensorflow::DEVICE_CPU_XLA_JIT) != std::string::npos) {
    return false;
  }
  const tensorflow::KernelDef* def = tensorflow::KernelDefBuilder("TvmCall").Device(tensorflow::DEVICE_CPU_XLA_JIT).Build();
  new tensorflow::kernel_factory::OpKernelRegistrar(  // lives as long as the process, as TF's own do
      def, "TvmCallXlaOp", [](tensorflow::OpKernelConstruction* c) -> tensorflow::OpKernel* {
        return new TvmCallXlaOp(c);
      });
  return true;
}

}  // namespace

REGISTER_XLA_OP(Name("TvmCall"), TvmCallXlaOp);

namespace {
const bool registered_late = RegisterLate();  // after REGISTER_XLA_OP: initializers run in order
}  // namespace

}  // namespace tftvm
