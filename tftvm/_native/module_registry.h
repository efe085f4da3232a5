// Process-wide table of loaded TVM modules, keyed by the SHA-256 of the
// module's library bytes (the key every TvmCall node carries).
#pragma once

#include <tvm/ffi/extra/module.h>

#include <mutex>
#include <string>
#include <unordered_map>

namespace tftvm {

class ModuleRegistry {
 public:
  static ModuleRegistry& Global();

  // Python registers modules it compiled or loaded, so eager calls need only the key.
  void Register(const std::string& key, tvm::ffi::Module module);

  // Directory where embedded library bytes are written before dlopen.
  void SetModuleDir(const std::string& dir);
  std::string ModuleDir();

  // The module for `key`: registered, else loaded from `embedded` library bytes
  // (the bytes a graph node carries). Throws std::runtime_error with a message
  // for the user when neither is possible.
  tvm::ffi::Module Get(const std::string& key, const std::string& embedded);

  size_t size();

 private:
  tvm::ffi::Module LoadEmbedded(const std::string& key, const std::string& bytes);

  std::mutex mu_;
  std::unordered_map<std::string, tvm::ffi::Module> modules_;
  std::string dir_;
};

}  // namespace tftvm
