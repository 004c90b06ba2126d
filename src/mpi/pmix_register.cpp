// PmixServer's registration of a round with libpmix: the round's namespace
// with the job's facts (sizes, the node and process maps, this node's
// peers), every local rank as a client, and the environment setup_fork
// gives them. The previous round's namespace is given up first.
#include "mpi/pmix_server.hpp"

#if DDPLAUNCH_HAVE_PMIX

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "mpi/dmodex.hpp"
#include "mpi/fence.hpp"
#include "mpi/libpmix.hpp"
#include "mpi/pmix_info.hpp"

namespace ddplaunch {

namespace {

// A string libpmix malloc'd, freed when done with.
struct Malloced {
  char* p = nullptr;
  ~Malloced() { std::free(p); }
};

// The round's namespace, with what every rank may ask of it.
void register_nspace(const Libpmix& api, const PmixJob& job) {
  Malloced node_map;
  Malloced proc_map;
  if (api.generate_regex(job.node_list().c_str(), &node_map.p) != PMIX_SUCCESS ||
      api.generate_ppn(job.proc_list().c_str(), &proc_map.p) != PMIX_SUCCESS) {
    throw std::runtime_error("PMIx could not encode the job's node and process maps");
  }
  const auto world = static_cast<uint32_t>(job.world_size);
  const auto local = static_cast<uint32_t>(job.local_size());
  InfoList info;
  info.u32(PMIX_UNIV_SIZE, world);
  info.u32(PMIX_JOB_SIZE, world);
  info.u32(PMIX_MAX_PROCS, world);
  info.u32(PMIX_APP_SIZE, world);
  info.u32(PMIX_APPNUM, 0);
  info.rank(PMIX_APPLDR, 0);
  info.flag(PMIX_SPAWNED, false);
  info.str(PMIX_JOBID, job.nspace);
  info.u32(PMIX_NUM_NODES, static_cast<uint32_t>(job.nnodes()));
  info.str(PMIX_NODE_MAP, node_map.p);
  info.str(PMIX_PROC_MAP, proc_map.p);
  info.u32(PMIX_LOCAL_SIZE, local);
  info.u32(PMIX_NODE_SIZE, local);
  info.str(PMIX_LOCAL_PEERS, job.local_peers());
  info.rank(PMIX_LOCALLDR, static_cast<uint32_t>(job.local_first()));
  info.u32(PMIX_NODEID, static_cast<uint32_t>(job.node_rank));
  info.str(PMIX_HOSTNAME, job.hosts.at(static_cast<size_t>(job.node_rank)));
  // No PMIX_PROC_DATA per rank: libpmix derives each local rank's local and
  // node rank from the maps above, and 4,096 of them would hold 20 MB.
  const pmix_status_t rc = api.register_nspace(job.nspace.c_str(), static_cast<int>(local),
                                               info.data(), info.size(), nullptr, nullptr);
  if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED) {
    throw std::runtime_error("PMIx_server_register_nspace: " + api.error_text(rc));
  }
}

// Every local rank, registered at once; their completions are awaited
// together.
void register_clients(const Libpmix& api, const PmixJob& job) {
  struct Latch {
    std::mutex mutex;
    std::condition_variable cv;
    uint32_t left = 0;
    pmix_status_t status = PMIX_SUCCESS;
  } latch;
  auto registered = [](pmix_status_t status, void* cbdata) {
    auto* l = static_cast<Latch*>(cbdata);
    std::lock_guard lock(l->mutex);
    if (status != PMIX_SUCCESS) {
      l->status = status;
    }
    if (--l->left == 0) {
      l->cv.notify_all();
    }
  };
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  const auto local = static_cast<uint32_t>(job.local_size());
  for (uint32_t i = 0; i < local; ++i) {
    const pmix_proc_t proc = make_proc(job.nspace, static_cast<uint32_t>(job.local_first()) + i);
    {
      std::lock_guard lock(latch.mutex);
      ++latch.left;  // before the call: its completion may come at once
    }
    const pmix_status_t rc = api.register_client(&proc, uid, gid, nullptr, registered, &latch);
    if (rc != PMIX_SUCCESS) {
      std::lock_guard lock(latch.mutex);
      --latch.left;  // it will not call back
      if (rc != PMIX_OPERATION_SUCCEEDED) {
        latch.status = rc;
        break;
      }
    }
  }
  std::unique_lock lock(latch.mutex);
  latch.cv.wait(lock, [&latch] { return latch.left == 0; });
  if (latch.status != PMIX_SUCCESS) {
    throw std::runtime_error("PMIx_server_register_client: " + api.error_text(latch.status));
  }
}

// What setup_fork gives every local rank is the same but for its rank:
// asked for the first rank only.
MpiRoundEnv fork_environment(const Libpmix& api, const PmixJob& job) {
  MpiRoundEnv out;
  out.rank_variable = "PMIX_RANK";
  const pmix_proc_t first = make_proc(job.nspace, static_cast<uint32_t>(job.local_first()));
  char** env = nullptr;
  const pmix_status_t rc = api.setup_fork(&first, &env);
  if (rc != PMIX_SUCCESS) {
    throw std::runtime_error("PMIx_server_setup_fork: " + api.error_text(rc));
  }
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    std::free(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos && entry.compare(0, eq, out.rank_variable) != 0) {
      out.shared.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
    }
  }
  std::free(env);
  return out;
}

}  // namespace

MpiRoundEnv PmixServer::register_round(const PmixJob& job) {
  if (!ready()) {
    return {};
  }
  // Loaded by ready(): the same table again.
  std::string why;
  const Libpmix& api = *load_libpmix(why);
  if (m_fences) {
    m_fences->abandon();
    m_dmodex->stop_serving();
  }
  if (m_tree_fences) {
    m_tree_fences->abandon();
  }
  if (!m_registered.empty()) {
    // The previous round's namespace: its clients are gone.
    api.deregister_nspace(m_registered.c_str(), nullptr, nullptr);
    m_deregistered = m_registered;
    m_registered.clear();
  }
  m_job = job;
  register_nspace(api, job);
  m_registered = job.nspace;
  register_clients(api, job);
  return fork_environment(api, job);
}

}  // namespace ddplaunch

#endif
