// Process-wide table of loaded TVM modules, keyed by the SHA-256 of the
// module's library bytes (the key every TvmCall node carries).
#pragma once

#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace tftvm {

// Thrown when a graph carries module bytes but embedded modules are disallowed.
class EmbeddedModulesRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ModuleRegistry {
 public:
  ModuleRegistry();
  static ModuleRegistry& Global();

  // Python registers modules it compiled or loaded, so eager calls need only the key.
  void Register(const std::string& key, tvm::ffi::Module module);

  // A bare tvm-ffi function (no library behind it) made into an op, under a key of its
  // own (kFunctionKeyPrefix...): it exists in this process only.
  static constexpr const char* kFunctionKeyPrefix = "function:";
  void RegisterFunction(const std::string& key, tvm::ffi::Function function);
  std::optional<tvm::ffi::Function> GetFunction(const std::string& key);

  // Directory where embedded library bytes are written before dlopen.
  void SetModuleDir(const std::string& dir);
  std::string ModuleDir();

  // The module for `key`: registered, else loaded from `embedded` library bytes
  // (the bytes a graph node carries). Throws EmbeddedModulesRefused when those
  // bytes would be needed but are disallowed, std::runtime_error with a message
  // for the user when loading is impossible.
  tvm::ffi::Module Get(const std::string& key, const std::string& embedded);

  // Whether graphs may bring their own native code (their embedded module bytes).
  // Starts from $TFTVM_ALLOW_EMBEDDED_MODULES (0/false/no/off disallow; default allow).
  void AllowEmbedded(bool allowed) { allow_embedded_ = allowed; }
  bool EmbeddedAllowed() const { return allow_embedded_; }

  size_t size();

 private:
  tvm::ffi::Module LoadEmbedded(const std::string& key, const std::string& bytes);

  std::atomic<bool> allow_embedded_;
  std::mutex mu_;
  std::unordered_map<std::string, tvm::ffi::Module> modules_;
  std::unordered_map<std::string, tvm::ffi::Function> functions_;
  std::string dir_;
};

}  // namespace tftvm
