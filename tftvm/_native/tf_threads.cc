#include "tf_threads.h"

#include <dlfcn.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/reflection/registry.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <tvm/ffi/function.h>

#include "tsl/platform/denormal.h"
#include "tsl/platform/env.h"
#include "tsl/platform/mutex.h"

namespace tftvm {
namespace {

// TVM's view of a parallel loop (tvm/runtime/c_backend_api.h): task `task_id` of
// `penv->num_task` runs its share of the loop's iterations.
struct ParallelGroupEnv {
  void* sync_handle;
  int32_t num_task;
};
using ParallelLambda = int (*)(int task_id, ParallelGroupEnv* penv, void* cdata);
using ParallelLaunch = int (*)(ParallelLambda lambda, void* cdata, int num_task);

// Tasks per pool thread: a thread slowed by a neighbour takes fewer of them.
constexpr int kTasksPerThread = 4;
// How long a helper waits for the next loop before it gives its thread back to TF, and how
// long a caller waits for its loop's last task before it sleeps. Waking a sleeping thread
// takes hundreds of microseconds on a virtual machine, and a model's kernels come one after
// the other a few microseconds apart: a thread that slept between them would be woken for
// every loop, and take most of it to arrive (benchmarks/HISTORY.md).
constexpr auto kHelperWait = std::chrono::microseconds(300);
constexpr auto kCallerWait = std::chrono::milliseconds(5);

std::atomic<ParallelLaunch> g_tvm_launch{nullptr};  // TVM's own launcher, as its loader set it
std::atomic<bool> g_enabled{true};                  // false: every loop on TVM's pool
std::atomic<int> g_max_threads{0};
std::atomic<int64_t> g_loops{0};  // loops this launcher has run
thread_local tsl::thread::ThreadPool* t_pool = nullptr;

// One parallel loop in flight. Its tasks are cut into one block of consecutive tasks per
// worker (the caller is worker 0, helpers number themselves as they join), and a worker
// takes the tasks of its own block first, then whatever is left in the others': on a quiet
// machine each thread works on the same part of the data from one loop to the next, as
// TVM's pool has it (the part it wrote stays in its core's cache), and a thread held up by
// a neighbour leaves its remaining tasks to the others. The caller returns once `done`
// reaches the task count; a helper that comes after every task is claimed finds nothing to
// do, so the caller never waits for a helper held up elsewhere.
struct Loop {
  struct alignas(64) Block {  // a cache line each: workers claim from their own
    std::atomic<int> next{0};
    int end = 0;
  };

  Loop(ParallelLambda lambda, void* cdata, int num_task, int workers)
      : lambda(lambda), cdata(cdata), env{nullptr, num_task}, workers(workers), blocks(new Block[workers]) {
    for (int w = 0; w < workers; ++w) {
      blocks[w].next.store(static_cast<int>(int64_t{num_task} * w / workers));
      blocks[w].end = static_cast<int>(int64_t{num_task} * (w + 1) / workers);
    }
  }

  ParallelLambda lambda;
  void* cdata;
  ParallelGroupEnv env;
  int workers;
  std::unique_ptr<Block[]> blocks;
  std::atomic<int> joined{1}, done{0}, failed{0};
  tsl::mutex mu;
  tsl::condition_variable finished;

  void Work(int home) {
    int ran = 0;
    for (int i = 0; i < workers; ++i) {
      Block& block = blocks[(home + i) % workers];
      for (int task; (task = block.next.fetch_add(1)) < block.end; ++ran) {
        if (lambda(task, &env, cdata) != 0) failed.store(1);
      }
    }
    if (ran > 0 && done.fetch_add(ran) + ran == env.num_task) {
      tsl::mutex_lock lock(mu);
      finished.notify_all();
    }
  }

  void Wait() {
    auto until = std::chrono::steady_clock::now() + kCallerWait;
    while (done.load() != env.num_task && std::chrono::steady_clock::now() < until) {
      sched_yield();  // lets a helper that shares this core finish its task
    }
    tsl::mutex_lock lock(mu);
    while (done.load() != env.num_task) finished.wait(lock);
  }
};

// The newest loop, for helpers to join: published by its caller, numbered by `g_generation`.
std::shared_ptr<Loop> g_current;
std::atomic<uint64_t> g_generation{0};
std::atomic<int> g_helpers{0};  // helpers on TF's threads now, working or waiting for a loop

// A helper: works on each loop published while it runs, and returns its thread to TF's
// pool once no loop has come for kHelperWait.
void Help() {
  uint64_t seen = 0;
  for (;;) {
    auto idle_since = std::chrono::steady_clock::now();
    uint64_t generation;
    while ((generation = g_generation.load()) == seen &&
           std::chrono::steady_clock::now() - idle_since < kHelperWait) {
      sched_yield();  // a thread that wants this core (TF's, a neighbour's) gets it
    }
    if (generation == seen) {
      g_helpers.fetch_sub(1);
      // A caller that counted this helper just before it left would be left alone.
      if (g_generation.load() == seen) return;
      g_helpers.fetch_add(1);
      continue;
    }
    seen = generation;
    if (std::shared_ptr<Loop> loop = std::atomic_load(&g_current)) loop->Work(loop->joined.fetch_add(1) % loop->workers);
  }
}

int LaunchOnTfThreads(ParallelLambda lambda, void* cdata, int num_task) {
  tsl::thread::ThreadPool* pool = t_pool;
  if (pool == nullptr || !g_enabled.load(std::memory_order_relaxed)) {
    return g_tvm_launch.load()(lambda, cdata, num_task);
  }
  int threads = std::max(1, pool->NumThreads());
  g_loops.fetch_add(1, std::memory_order_relaxed);
  if (num_task <= 0) num_task = threads * kTasksPerThread;
  int workers = std::min(threads, num_task);
  auto loop = std::make_shared<Loop>(lambda, cdata, num_task, workers);
  for (int seen = g_max_threads.load(); workers > seen && !g_max_threads.compare_exchange_weak(seen, workers);) {
  }
  if (workers > 1) {
    std::atomic_store(&g_current, loop);
    g_generation.fetch_add(1);
    for (int have = g_helpers.load(); have < workers - 1; ++have) {
      g_helpers.fetch_add(1);
      pool->Schedule(Help);
    }
  }
  loop->Work(0);
  loop->Wait();
  if (loop->failed.load()) {
    TVMFFIErrorSetRaisedFromCStr("RuntimeError", "a task of a TVM parallel loop failed");
    return -1;
  }
  return 0;
}

// dlsym also searches a library's dependencies: a symbol found must be the library's own.
std::string DefiningFile(const void* symbol) {
  Dl_info where;
  return dladdr(symbol, &where) != 0 && where.dli_fname != nullptr ? where.dli_fname : "";
}

bool SameFile(const std::string& a, const std::string& b) {
  std::unique_ptr<char, decltype(&std::free)> ra(realpath(a.c_str(), nullptr), &std::free),
      rb(realpath(b.c_str(), nullptr), &std::free);
  return ra && rb && std::strcmp(ra.get(), rb.get()) == 0;
}

}  // namespace

void UseTfThreads(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return;
  auto* launch = static_cast<ParallelLaunch*>(dlsym(handle, "__TVMBackendParallelLaunch"));
  bool barrier = dlsym(handle, "__TVMBackendParallelBarrier") != nullptr;
  bool own = launch != nullptr && SameFile(DefiningFile(launch), path);
  if (own && !barrier && *launch != nullptr && *launch != &LaunchOnTfThreads) {
    g_tvm_launch.store(*launch);
    *launch = &LaunchOnTfThreads;
  }
  dlclose(handle);
}

ParallelScope::ParallelScope(tsl::thread::ThreadPool* pool) : outer_(t_pool) { t_pool = pool; }

ParallelScope::~ParallelScope() { t_pool = outer_; }

int MaxLoopThreads() { return g_max_threads.load(); }

tsl::thread::ThreadPool* OwnPool(int threads) {
  // Never destroyed: helpers may still be leaving it when the process exits.
  static tsl::thread::ThreadPool* pool =
      new tsl::thread::ThreadPool(tsl::Env::Default(), "tftvm_loops", std::max(1, threads));
  return pool;
}

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef()
      .def("tftvm.set_tf_threads", [](bool enabled) { g_enabled.store(enabled); })
      .def("tftvm.loops_launched", []() -> int64_t { return g_loops.load(); })
      .def("tftvm.use_tf_threads_for_library",
           [](tvm::ffi::String path) { UseTfThreads(std::string(path)); })
      // (threads, function, *args): function(*args) with its parallel loops on OwnPool(threads).
      .def_packed("tftvm.call_on_shared_threads", [](tvm::ffi::PackedArgs args, tvm::ffi::Any* result) {
        int threads = args[0].cast<int>();
        tvm::ffi::Function function = args[1].cast<tvm::ffi::Function>();
        ParallelScope scope(OwnPool(threads));
        // Denormals flushed and read as zero in the calling thread too, as in TF's threads,
        // where TvmCall kernels and the pool's helpers run: the VM is called from Python's.
        tsl::port::ScopedFlushDenormal flush;
        function.CallPacked(args.Slice(2), result);
      });
}

}  // namespace tftvm
