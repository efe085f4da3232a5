#include "module_registry.h"

#include "tf_threads.h"

#include <fcntl.h>
#include <openssl/sha.h>  // BoringSSL, exported by libtensorflow_framework
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace tftvm {
namespace {

std::string DefaultModuleDir() {
  if (const char* d = std::getenv("TFTVM_CACHE_DIR")) return std::string(d) + "/modules";
  if (const char* d = std::getenv("XDG_CACHE_HOME")) return std::string(d) + "/tftvm/modules";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/tftvm/modules";
}

// mkdir -p with 0700 for every directory we create: modules are native code.
void MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') {
      std::string part = path.substr(0, pos);
      if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
        throw std::runtime_error("cannot create module directory '" + part +
                                 "': " + std::strerror(errno));
      }
    }
  }
}

bool FileHasBytes(const std::string& path, const std::string& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str() == bytes;
}

// Writes to a temporary file and renames it into place, so a concurrent
// reader never sees a partial library.
void WriteAtomically(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = mkstemp(tmp.data());
  if (fd < 0) throw std::runtime_error("cannot create '" + tmp + "': " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      close(fd);
      unlink(tmp.c_str());
      throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  fsync(fd);
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "': " + std::strerror(errno));
  }
}

std::string Sha256Hex(const std::string& bytes) {
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), digest);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : digest) {
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 15]);
  }
  return hex;
}

bool EnvAllowsEmbeddedModules() {
  const char* v = std::getenv("TFTVM_ALLOW_EMBEDDED_MODULES");
  if (v == nullptr) return true;
  std::string s(v);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return !(s == "0" || s == "false" || s == "no" || s == "off");
}

}  // namespace

ModuleRegistry::ModuleRegistry() : allow_embedded_(EnvAllowsEmbeddedModules()) {}

ModuleRegistry& ModuleRegistry::Global() {
  // Leaked on purpose: kernels that TF destroys at exit still hold modules.
  static ModuleRegistry* registry = new ModuleRegistry();
  return *registry;
}

void ModuleRegistry::Register(const std::string& key, tvm::ffi::Module module) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_.insert_or_assign(key, std::move(module));
}

void ModuleRegistry::RegisterFunction(const std::string& key, tvm::ffi::Function function) {
  std::lock_guard<std::mutex> lock(mu_);
  functions_.insert_or_assign(key, std::move(function));
}

std::optional<tvm::ffi::Function> ModuleRegistry::GetFunction(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(key);
  if (it == functions_.end()) return std::nullopt;
  return it->second;
}

void ModuleRegistry::SetModuleDir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  dir_ = dir;
}

std::string ModuleRegistry::ModuleDir() {
  std::lock_guard<std::mutex> lock(mu_);
  return dir_.empty() ? DefaultModuleDir() : dir_;
}

size_t ModuleRegistry::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return modules_.size();
}

tvm::ffi::Module ModuleRegistry::Get(const std::string& key, const std::string& embedded) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(key);
  if (it != modules_.end()) return it->second;
  if (embedded.empty()) {
    throw std::runtime_error("no TVM module with key " + key +
                             " is loaded in this process and the node carries no module "
                             "bytes; create the op with tftvm.op() or tftvm.load_op() first");
  }
  if (!allow_embedded_) {
    throw EmbeddedModulesRefused(
        "the graph carries its own TVM module " + key +
        " (native code), and loading embedded modules is disabled "
        "(TFTVM_ALLOW_EMBEDDED_MODULES=0 or tftvm.allow_embedded_modules(False)); create "
        "the op in this process with tftvm.op() or tftvm.load_op() to run trusted code");
  }
  tvm::ffi::Module module = LoadEmbedded(key, embedded);
  modules_.emplace(key, module);
  return module;
}

tvm::ffi::Module ModuleRegistry::LoadEmbedded(const std::string& key, const std::string& bytes) {
  // The key is the library's SHA-256: bytes that do not match were altered
  // after the graph was built, and are never loaded.
  if (Sha256Hex(bytes) != key) {
    throw std::runtime_error("the embedded TVM module does not match its key " + key +
                             " (SHA-256 mismatch); refusing to load altered code");
  }
  std::string dir = dir_.empty() ? DefaultModuleDir() : dir_;
  MakeDirs(dir);
  std::string path = dir + "/" + key + ".so";
  if (!FileHasBytes(path, bytes)) WriteAtomically(path, bytes);
  try {
    tvm::ffi::Module module = tvm::ffi::Module::LoadFromFile(path);
    UseTfThreads(path);
    return module;
  } catch (const tvm::ffi::Error& e) {
    throw std::runtime_error("cannot load TVM module '" + path + "': " + e.kind() + ": " +
                             e.message());
  }
}

}  // namespace tftvm
