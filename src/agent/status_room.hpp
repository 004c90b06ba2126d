// StatusRoom: this node's answer to `ddplaunch status`, /metrics and
// /status.json (docs/STATUS.md): the node, its ranks as the RoundView shows
// them now (with their process trees' CPU and memory read from /proc, and
// GPU memory where NVML can say), and on node 0 the job, with the nodes it
// lost (it observes the verdicts). The store's requests reach it through
// StatusTree. Built on request only. Not thread-safe: the agent's thread.
#pragma once

#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "agent/round_view.hpp"
#include "config/config.hpp"
#include "node/identity.hpp"
#include "node/process_usage.hpp"
#include "posix/clock.hpp"
#include "status/status_record.hpp"

namespace ddplaunch {

class StatusRoom : public RoundObserver {
 public:
  // Each process's GPU memory in bytes (NVML, opened on the first request;
  // none or nullopt: not shown).
  using GpuMemory = std::function<std::optional<std::unordered_map<pid_t, unsigned long long>>()>;
  // The nodes a job's status lists as lost: the last this many.
  static constexpr size_t k_lost_nodes = 1024;

  // All must outlive it.
  StatusRoom(const RoundView& view, const Config& config, const NodeIdentity& self,
             const Clock& clock);
  void set_gpu_memory(GpuMemory read) { m_gpu_memory = std::move(read); }

  // This node's answer (nullopt when the request's node filter leaves it
  // out; node 0 always answers: it alone knows the job's size).
  std::optional<NodeStatus> answer(const StatusRequest& request) const;
  // A store request's text, answered as the responder expects ("": none).
  std::string answer_text(const std::string& request) const;

  // RoundObserver
  void on_verdict(const JobVerdict& verdict) override;

 private:
  JobStatus job_status(const RoundView::Round& round, double wall) const;
  RankStatus rank_status(size_t local_rank, const ProcessUsage& usage, Clock::TimePoint now,
                         double wall, double round_start) const;

  const RoundView& m_view;
  const Config& m_config;
  const NodeIdentity& m_self;
  const Clock& m_clock;
  GpuMemory m_gpu_memory;
  std::vector<LostNodeStatus> m_lost_nodes;
};

}  // namespace ddplaunch
