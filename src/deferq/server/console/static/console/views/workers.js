// /dashboard/workers: every worker process and master, from the heartbeats they publish
// in the store (kv "workers" and "masters"); a record expires when its process stops.
// Admins order a worker quiet (no new job) or to stop, through the store.

import {code, empty, h, note, reconcile, row, section, setAttr, setChildren, setText, table} from "../dom.js";
import {ago, count, duration, local} from "../format.js";
import {messageLine, pageHead} from "./common.js";
import {progressBar} from "./jobtable.js";

const LATE = 60; // seconds without a heartbeat shown in red (a worker beats every third of its lease)
const WORKER_COLUMNS = [["worker"], ["host", "opt"], ["pid", "num opt"], ["queues"], ["busy", "num"],
  ["running now", "wide"], ["processed", "num"], ["heartbeat", "num"], ["master", "opt"]];
const MASTER_COLUMNS = [["master"], ["host"], ["pid", "num"], ["up since", "opt"], ["store"], ["pools", "wide"],
  ["heartbeat", "num"]];

function running(jobs) {
  if (!jobs.length) return h("span", {class: "muted", text: "idle"});
  return jobs.map((job) => h("span", {class: "running", dataset: {job: job.id}},
    h("a", {href: `/dashboard/jobs/${encodeURIComponent(job.id)}`, text: job.task}),
    h("span", {class: "muted", text: ` ${duration(job.running_for)}`}), progressBar().el));
}

export function mount(root, ctx) {
  const head = pageHead("Workers");
  const message = messageLine();
  const admin = ctx.can("admin");
  const columns = admin ? [...WORKER_COLUMNS, ["", "row-actions"]] : WORKER_COLUMNS;
  const workers = table(columns, {id: "workers"});
  const masterColumns = admin ? [...MASTER_COLUMNS, ["", "row-actions"]] : MASTER_COLUMNS;
  const masters = table(masterColumns, {id: "masters"});
  const noWorkers = empty("No worker is online.",
    h("span", {}, "Start one: ", code("deferq worker --app tasks:app --url …"), " or a supervisor: ",
      code("deferq run --config deferq.toml"), ". Each worker publishes a heartbeat every few seconds; it shows up here " +
      "within one."));
  const masterPanel = section("Masters", masters.el);
  root.append(head.el, message.el, section("Worker processes", workers.el, noWorkers), masterPanel,
    note("A worker's record lives for two lease periods after its last heartbeat, a master's for five checks: ",
      "a process that died disappears from this page by itself. Processed counts start at zero when a ",
      "process starts."));

  // Quiet and Stop, each asked first; a worker obeys at its next heartbeat, a master at its
  // next check.
  const WHAT = {
    worker: {quiet: "takes no new job and finishes the ones it runs; it stays up", stop: "takes no new job, " +
      "finishes the ones it runs, then exits (as on SIGTERM; a master starts a new one in its place)"},
    master: {quiet: "orders each of its workers quiet and starts no new one; they all stay up", stop: "stops as " +
      "on SIGTERM: its workers finish the jobs they run, then all exit"},
  };
  function orderButtons(kind, name, mode) {
    const choices = [["quiet", "Quiet", "", WHAT[kind].quiet], ["stop", "Stop", "danger", WHAT[kind].stop]]
      .filter(([order]) => !mode || (mode === "quiet" && order === "stop"));
    return h("span", {class: "row-buttons"}, choices.map(([order, label, cls, what]) => {
      const button = h("button", {type: "button", class: `small ${cls}`, text: label, dataset: {order},
        "aria-label": `${label} ${kind} ${name}`});
      button.addEventListener("click", async () => {
        if (!(await ctx.confirm({title: `${label} ${kind} ${name}?`, action: label, danger: order === "stop",
          body: [`It ${what}, within ${kind === "worker" ? "one heartbeat" : "one check"}.`]}))) return;
        button.disabled = true;
        message.clear();
        try {
          await ctx.api(`/v1/${kind}s/${encodeURIComponent(name)}/${order}`, {method: "POST"});
          ctx.toast(`${kind === "worker" ? "Worker" : "Master"} ${name}: ${label.toLowerCase()} ordered.`, "ok");
        } catch (error) {
          message.show(`Could not ${order} ${name}: ${error.message}`);
        }
        button.disabled = false;
        refresh();
      });
      return button;
    }));
  }

  async function refresh() {
    const data = await ctx.api("/v1/workers");
    if (!ctx.alive()) return;
    noWorkers.hidden = data.workers.length > 0;
    workers.el.hidden = !data.workers.length;
    reconcile(workers.body, data.workers, (w) => w.worker, () => row(columns.length,
      columns.map((c) => c[1])), (tr, w) => {
      const cells = tr.children;
      const mode = w.stopping ? "stopping" : w.quiet ? "quiet" : "";
      setChildren(cells[0], `${w.worker} ${mode}`, () => [w.worker, mode ? " " : null,
        mode ? h("span", {class: "flag", text: mode, title: mode === "quiet" ? "takes no new job" :
          "exits once its running jobs finish"}) : null]);
      if (admin) setChildren(cells[WORKER_COLUMNS.length], mode, () => orderButtons("worker", w.worker, mode));
      setText(cells[1], w.host);
      setText(cells[2], w.pid);
      setText(cells[3], (w.queues || []).join(", "));
      setText(cells[4], `${w.jobs.length}/${w.concurrency ?? "?"}`);
      setChildren(cells[5], w.jobs.map((j) => j.id).join(), () => running(w.jobs));
      for (const [i, job] of w.jobs.entries()) {
        const span = cells[5].querySelectorAll(".running")[i];
        if (!span) continue;
        setText(span.querySelector(".muted"), ` ${duration(job.running_for)}`);
        progressBar(null, span.querySelector(".progress")).show({...job, state: "active"});
      }
      setText(cells[6], count(w.processed));
      setText(cells[7], `${duration(w.heartbeat_age)} ago`);
      setAttr(cells[7], "title", w.seen ? local(w.seen) : null);
      cells[7].classList.toggle("alarm", w.heartbeat_age > LATE);
      setText(cells[8], w.master || "—");
    });
    masterPanel.hidden = !data.masters.length;
    reconcile(masters.body, data.masters, (m) => m.id, () => row(masterColumns.length,
      masterColumns.map((c) => c[1])), (tr, m) => {
      const cells = tr.children;
      const mode = m.quiet ? "quiet" : "";
      setChildren(cells[0], `${m.id} ${mode}`, () => [m.id, mode ? " " : null,
        mode ? h("span", {class: "flag", text: "quiet", title: "its workers take no new job"}) : null]);
      if (admin) setChildren(cells[MASTER_COLUMNS.length], mode, () => orderButtons("master", m.id, mode));
      setText(cells[1], m.host);
      setText(cells[2], m.pid);
      setText(cells[3], m.started ? `${local(m.started)} (${ago(m.started)})` : "—");
      setText(cells[4], m.store_up === false ? "unreachable" : "up");
      cells[4].classList.toggle("alarm", m.store_up === false);
      setText(cells[5], Object.entries(m.pools || {}).map(([name, pool]) =>
        `${name}: ${(pool.queues || []).join(",")} · ${(pool.children || []).length}/${pool.target} ` +
        `(${pool.min}-${pool.max}) × ${pool.concurrency}`).join("; "));
      setText(cells[6], `${duration(m.heartbeat_age)} ago`);
    });
    head.updated();
  }

  return {refresh};
}
