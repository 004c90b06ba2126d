#include "output/status_page.hpp"

namespace ddplaunch {

const std::string& status_page_html() {
  static const std::string page = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ddplaunch job</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em 0; }
#job { color: #444; margin-bottom: 1em; }
#grid { display: flex; flex-wrap: wrap; gap: 4px; margin: .5em 0 1.5em 0; }
.rank { width: 5.2em; height: 3em; border-radius: 4px; font-size: 12px; padding: 2px 4px;
        box-sizing: border-box; color: #fff; overflow: hidden; }
.rank b { display: block; font-size: 14px; }
.state-running { background: #2e7d32; } .state-stopped { background: #f9a825; color: #000; }
.state-stopping { background: #757575; } .state-succeeded { background: #1565c0; }
.state-failed, .state-signaled { background: #c62828; } .state-missing { background: #000; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
td, th { border-bottom: 1px solid #ddd; padding: 2px 10px; text-align: left; }
#timeline li { margin: 2px 0; } .ev-failure { color: #c62828; font-weight: bold; }
.ev-restart { color: #ef6c00; font-weight: bold; } .ev-round { color: #1565c0; }
#legend span { display: inline-block; padding: 0 6px; margin-right: 4px; border-radius: 3px; color: #fff; }
</style></head>
<body>
<h1>ddplaunch job <span id="run-id"></span></h1>
<div id="job">waiting for the first answer…</div>
<div id="legend"><span class="state-running">running</span><span class="state-stopped">stopped</span><span class="state-stopping">stopping</span><span class="state-succeeded">succeeded</span><span class="state-failed">failed</span><span class="state-missing">no answer</span></div>
<h2>Ranks</h2><div id="grid"></div>
<h2>Nodes</h2><table id="nodes"><thead><tr><th>node</th><th>host</th><th>address</th><th>state</th><th>agent pid</th><th>ranks</th></tr></thead><tbody></tbody></table>
<h2>Timeline</h2><ol id="timeline"></ol>
<script>
"use strict";
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function secs(s) { return s == null ? "-" : s < 600 ? s.toFixed(1) + " s" : (s / 60).toFixed(0) + " min"; }
function drawStatus(doc) {
  const job = doc.job;
  document.body.dataset.round = job ? job.round : "";
  document.getElementById("run-id").textContent = job ? job.run_id : "";
  document.getElementById("job").textContent = job
    ? `round ${job.round} · restarts ${job.restarts}/${job.max_restarts} · nodes ${job.nnodes} (expected ${job.nnodes_expected}) · world size ${job.world_size} · up ${secs(job.elapsed_s)}`
    : "node 0 did not answer";
  const grid = document.getElementById("grid");
  grid.replaceChildren();
  for (const r of doc.ranks.slice().sort((a, b) => a.rank - b.rank)) {
    const cell = el("div", {id: "rank-" + r.rank, class: "rank state-" + r.state, "data-state": r.state,
                            title: `rank ${r.rank} · node ${r.node_rank} · pid ${r.pid} · ${r.state}\n${r.last_line}`});
    cell.append(el("b", {}, String(r.rank)), el("span", {}, r.state));
    grid.append(cell);
  }
  for (const n of doc.missing) grid.append(el("div", {class: "rank state-missing", "data-state": "missing"}, "node " + n));
  const body = document.querySelector("#nodes tbody");
  body.replaceChildren();
  for (const n of doc.nodes) {
    const tr = el("tr", {id: "node-" + n.node_rank, "data-state": n.state});
    for (const v of [n.node_rank, n.host, n.addr, n.state, n.agent_pid, n.local_ranks]) tr.append(el("td", {}, String(v)));
    body.append(tr);
  }
}
function describe(e) {
  switch (e.event) {
    case "round_start": return [`round ${e.round} started: ${e.world_size} ranks`, "ev-round"];
    case "verdict": return e.regroup ? [`round ${e.round}: the nodes meet again`, "ev-restart"]
      : e.root_rank != null ? [`round ${e.round}: rank ${e.root_rank} failed (exit ${e.exit_code})`, "ev-failure"]
      : [`round ${e.round}: ${e.exit_code ? "ended: " + e.message + " (exit " + e.exit_code + ")" : "succeeded"}`, e.exit_code ? "ev-failure" : "ev-round"];
    case "rank_exit": return e.exit_code === 0 ? null : [`round ${e.round}: rank ${e.rank} exited with ${e.signal || "code " + e.exit_code}`, "ev-failure"];
    case "restart": return [`restart: round ${e.round} (${e.restarts}/${e.max_restarts})`, "ev-restart"];
    case "node_lost": return [`round ${e.round}: node ${e.node_rank} lost`, "ev-failure"];
    case "spare_taken": return [`round ${e.round}: spare ${e.spare} took node ${e.node_rank}'s place`, "ev-restart"];
    case "preempted": return [`round ${e.round}: preempted (${e.signal})`, "ev-restart"];
    case "job_end": return [`job ended: exit ${e.exit_code}`, e.exit_code ? "ev-failure" : "ev-round"];
    case "rendezvous_end": return [`rendezvous done in ${secs(e.seconds)}`, ""];
    default: return null;
  }
}
function drawEvents(events) {
  const list = document.getElementById("timeline");
  list.replaceChildren();
  for (const e of events) {
    const d = describe(e);
    if (!d) continue;
    const t = new Date(e.time * 1000).toLocaleTimeString();
    list.append(el("li", {class: d[1], "data-event": e.event}, `${t} ${d[0]}`));
  }
}
async function refresh() {
  try {
    const [s, e] = await Promise.all([fetch("/status.json"), fetch("/events.json")]);
    if (s.ok) drawStatus(await s.json());
    if (e.ok) drawEvents(await e.json());
  } catch (err) {
    document.getElementById("job").textContent = "the job is not answering (it may have ended)";
  }
}
refresh();
setInterval(refresh, 1000);
</script></body></html>
)HTML";
  return page;
}

std::string events_json(const std::deque<std::string>& lines) {
  std::string out = "[";
  for (const auto& line : lines) {
    if (out.size() > 1) {
      out += ",";
    }
    out.append(line, 0, line.empty() || line.back() != '\n' ? line.size() : line.size() - 1);
  }
  return out + "]";
}

}  // namespace ddplaunch
