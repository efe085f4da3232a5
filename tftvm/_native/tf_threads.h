// TVM's parallel loops on TF's intra-op thread pool.
//
// A compiled TVM library calls its parallel loops through a function pointer it exports,
// `__TVMBackendParallelLaunch`, which TVM's loader points at TVM's own thread pool. That
// pool is per calling thread (every TF thread that runs a TvmCall gets one, all spinning
// on the same cores) and splits a loop into one fixed share per thread, so a core taken
// by a neighbour process holds up the whole loop. UseTfThreads points a loaded library
// at a launcher that, inside a TvmCall (a ParallelScope is open), splits the loop into
// several tasks per thread and runs them on the caller and on helpers on TF's intra-op pool,
// each thread taking the next task when it is free: one pool serves TF's kernels and TVM's,
// and a core taken by a neighbour costs a loop that core's share only. Helpers stay a short
// while for the next loop (a model's kernels follow each other microseconds apart) and then
// give their thread back to TF. Outside a TvmCall (compile_model's VM, a call from Python)
// the loop goes to TVM's pool unless the caller opens a ParallelScope of its own:
// compile_model's VM runs from Python inside one (tftvm.call_on_shared_threads) on a pool
// of tftvm's, OwnPool, with the same launcher, so a busy core costs the VM's loops its
// share only, as it costs a TvmCall's.
#pragma once

#include <string>

#include "tsl/platform/threadpool.h"

namespace tftvm {

// Points the library loaded from `path` at the launcher, unless it also uses TVM's
// parallel barrier (its tasks must then all run at once, as only TVM's pool runs them).
// A library not loaded, or without parallel loops, is left as it is.
void UseTfThreads(const std::string& path);

// While one is open on a thread, parallel loops called from that thread run on `pool`.
class ParallelScope {
 public:
  explicit ParallelScope(tsl::thread::ThreadPool* pool);
  ~ParallelScope();
  ParallelScope(const ParallelScope&) = delete;
  ParallelScope& operator=(const ParallelScope&) = delete;

 private:
  tsl::thread::ThreadPool* outer_;
};

// A process-wide pool of `threads` threads for loops called outside TF's executor, made on
// first use (a later call's `threads` is ignored).
tsl::thread::ThreadPool* OwnPool(int threads);

// The most threads one parallel loop of a TvmCall has run on in this process.
int MaxLoopThreads();

}  // namespace tftvm
