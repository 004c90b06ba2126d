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
