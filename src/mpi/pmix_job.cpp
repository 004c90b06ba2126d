#include "mpi/pmix_job.hpp"

#include <algorithm>
#include <map>

namespace ddplaunch {

namespace {

std::string join_ranks(int first, int count) {
  std::string out;
  for (int r = first; r < first + count; ++r) {
    out += (out.empty() ? "" : ",") + std::to_string(r);
  }
  return out;
}

}  // namespace

int PmixJob::node_of(int rank) const {
  if (rank < 0 || rank >= world_size) {
    return -1;
  }
  // first_rank is ascending: the last node starting at or before `rank`.
  auto it = std::upper_bound(first_rank.begin(), first_rank.end(), rank);
  return static_cast<int>(it - first_rank.begin()) - 1;
}

std::string PmixJob::node_list() const {
  std::string out;
  for (const auto& h : hosts) {
    out += (out.empty() ? "" : ",") + h;
  }
  return out;
}

std::string PmixJob::proc_list() const {
  std::string out;
  for (size_t n = 0; n < nproc.size(); ++n) {
    out += (n == 0 ? "" : ";") + join_ranks(first_rank[n], nproc[n]);
  }
  return out;
}

std::string PmixJob::local_peers() const {
  return join_ranks(local_first(), local_size());
}

std::string pmix_nspace(const std::string& run_id, const std::string& job_id, int round,
                        int restarts) {
  auto name = [](const std::string& id, size_t most) {
    std::string out = id.substr(0, most);
    for (char& c : out) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-';
      if (!ok) {
        c = '_';
      }
    }
    return out;
  };
  std::string nspace = "ddplaunch." + name(run_id, 160);
  if (!job_id.empty()) {
    nspace += "." + name(job_id, 64);
  }
  return nspace + "." + std::to_string(round) + "." + std::to_string(restarts);
}

PmixJob make_pmix_job(const JobLayout& layout, const std::vector<std::string>& hosts) {
  PmixJob job;
  job.nspace = pmix_nspace(layout.run_id, layout.job_id, layout.round, layout.restart_count);
  job.node_rank = layout.node_rank;
  job.world_size = layout.world_size;
  job.tree_fanout = layout.tree_fanout;
  const std::vector<SizeRun> sizes = layout.node_sizes.empty()
                                         ? std::vector<SizeRun>{{layout.local_world_size, 1}}
                                         : layout.node_sizes;
  int next = 0;
  for (const auto& run : sizes) {
    for (int i = 0; i < run.count; ++i) {
      job.first_rank.push_back(next);
      job.nproc.push_back(run.nproc);
      next += run.nproc;
    }
  }
  // A name for every node, unique: the node map must tell them apart.
  std::map<std::string, int> seen;
  std::vector<std::string> host_of;
  for (int n = 0; n < job.nnodes(); ++n) {
    const auto i = static_cast<size_t>(n);
    std::string name =
        i < hosts.size() && !hosts[i].empty() ? hosts[i] : "node" + std::to_string(n);
    if (n == layout.node_rank && !layout.hostname.empty() &&
        (i >= hosts.size() || hosts[i].empty())) {
      name = layout.hostname;
    }
    host_of.push_back(name);
    if (seen[name]++ > 0) {
      job.cohosted = true;
      name += ".n" + std::to_string(n);
    }
    job.hosts.push_back(std::move(name));
  }
  for (int n = 0; n < job.nnodes(); ++n) {
    const auto i = static_cast<size_t>(n);
    if (host_of[i] == host_of.at(static_cast<size_t>(layout.node_rank))) {
      job.host_ranks += job.nproc[i];
    }
  }
  return job;
}

FenceKeys fence_keys(const std::string& nspace, const std::string& signature, long seq,
                     const std::vector<int>& nodes) {
  const std::string base =
      "mpi/" + nspace + "/fence/" + signature + "/" + std::to_string(seq) + "/";
  FenceKeys keys;
  keys.records.reserve(nodes.size());
  for (int n : nodes) {
    keys.records.push_back(base + std::to_string(n));
  }
  keys.counter = base + "arrived";
  keys.done = base + "done";
  keys.read = base + "read";
  return keys;
}

}  // namespace ddplaunch
