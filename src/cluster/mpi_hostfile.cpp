#include "cluster/mpi_hostfile.hpp"

#include <charconv>
#include <sstream>
#include <vector>

namespace ddplaunch {

namespace {

struct HostLine {
  std::string host;
  int slots = 1;
};

// "host [slots=N] [max_slots=N]" or "host:N"; '#' starts a comment.
// Throws nothing: a line it cannot read is named in `error`.
std::vector<HostLine> parse(const std::string& text, std::string& error) {
  std::vector<HostLine> lines;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host;
    if (!(words >> host)) {
      continue;
    }
    HostLine h;
    std::string word;
    auto count = [&](std::string_view digits) {
      int n = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      if (ec != std::errc() || end != digits.data() + digits.size() || n < 1) {
        error =
            "line " + std::to_string(number) + " has a slot count that is not a positive number";
        return 0;
      }
      return n;
    };
    if (const auto colon = host.find(':'); colon != std::string::npos) {
      h.slots = count(std::string_view(host).substr(colon + 1));
      host.resize(colon);
    }
    while (words >> word) {
      if (word.starts_with("slots=")) {
        h.slots = count(std::string_view(word).substr(6));
      }
    }
    if (!error.empty()) {
      return {};
    }
    h.host = host;
    lines.push_back(h);
  }
  return lines;
}

// "job-node-0-1.job" is host "job-node-0-1", as its pod names itself.
bool names(const std::string& entry, const std::string& hostname) {
  return !hostname.empty() &&
         (entry == hostname || (entry.starts_with(hostname) && entry[hostname.size()] == '.') ||
          (hostname.starts_with(entry) && hostname[entry.size()] == '.'));
}

}  // namespace

Detection detect_mpi_hostfile(const EnvMap& env, const ClusterFiles& files) {
  Detection d;
  d.detector = "MPI hostfile";
  const std::string* named = env_value(env, "OMPI_MCA_orte_default_hostfile");
  const bool in_pod = env_value(env, "KUBERNETES_SERVICE_HOST") != nullptr;
  if (!files.mpi_hostfile || (!in_pod && named == nullptr)) {
    return d;
  }
  // torchrun's variables, a Slurm job or mpirun say it all themselves.
  auto it = env.lower_bound("PET_");
  if ((it != env.end() && it->first.starts_with("PET_")) ||
      env_value(env, "SLURM_JOB_ID") != nullptr ||
      env_value(env, "OMPI_COMM_WORLD_SIZE") != nullptr) {
    return d;
  }
  const std::string& path = files.mpi_hostfile_path;
  std::string error;
  const std::vector<HostLine> lines = parse(*files.mpi_hostfile, error);
  if (!error.empty() || lines.empty()) {
    d.error = path + (error.empty() ? " lists no host" : ": " + error) +
              ": fix it, or give --nnodes and --node-rank";
    return d;
  }
  int rank = -1;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (names(lines[i].host, files.hostname)) {
      rank = static_cast<int>(i);
      break;
    }
  }
  if (rank < 0) {
    d.error = "this host (" + files.hostname + ") is not in " + path +
              ": run ddplaunch on the hosts it lists, or give --nnodes and --node-rank";
    return d;
  }
  d.values["nnodes"] = Setting{std::to_string(lines.size()), path};
  d.values["node_rank"] = Setting{std::to_string(rank), path};
  d.values["master_addr"] = Setting{lines.front().host, path};
  d.values["nproc_per_node"] =
      Setting{std::to_string(lines[static_cast<size_t>(rank)].slots), path};
  return d;
}

}  // namespace ddplaunch
