// /dashboard/: every queue's counts, the store, the workers, and charts of the store's history.

import {empty, h, link, reconcile, row, section, setText, table} from "../dom.js";
import {FILTER_STATES, STATES, count, duration} from "../format.js";
import {historyPanel} from "../history.js";
import {card, pageHead, retryingCount, stateCards} from "./common.js";
import {ms} from "./stores.js";

export function mount(root, ctx) {
  const head = pageHead("Overview");
  const totals = stateCards((state) => `/dashboard/jobs?state=${state}`, FILTER_STATES);
  const store = card("store");
  const workers = card("workers online");
  // GET /v1/server: this process's slots, all processes' queue and busy answers; shown with --max-inflight
  const server = card("server load");
  server.el.classList.add("wide-card");
  server.el.hidden = true;
  const health = h("div", {class: "cards side"}, store.el, workers.el, server.el);
  store.el.classList.add("link-card");
  workers.el.classList.add("link-card");
  const storeLink = h("a", {href: "/dashboard/stores", class: "card-link", "aria-label": "the store"});
  const workersLink = h("a", {href: "/dashboard/workers", class: "card-link", "aria-label": "the workers"});
  store.el.append(storeLink);
  workers.el.append(workersLink);

  const charts = historyPanel(ctx, null);

  const columns = [["queue"], ...STATES.map((s) => [s, `num ${["blocked", "succeeded", "cancelled"].includes(s) ? "opt" : ""}`]),
    ["oldest wait", "num"]];
  const queues = table(columns, {id: "queues"});
  const nothing = empty("No queues yet.",
    "A queue appears when its first job is enqueued: POST /v1/jobs, or task.enqueue() in Python.");
  nothing.hidden = true;
  root.append(head.el, h("div", {class: "overview-top"}, totals.el, health), charts.el,
    section("Queues", queues.el, nothing));

  async function refresh() {
    const [q, s, w, r, l] = await Promise.allSettled([ctx.api("/v1/queues"), ctx.api("/v1/store"),
      ctx.api("/v1/workers"), retryingCount(ctx, null), ctx.api("/v1/server"), charts.refresh()]);
    if (!ctx.alive()) return;
    if (q.status === "fulfilled") showQueues(q.value.queues, r.status === "fulfilled" ? r.value : null);
    if (s.status === "fulfilled") showStore(s.value);
    if (w.status === "fulfilled") showWorkers(w.value);
    if (l.status === "fulfilled") showLoad(l.value);
    head.updated();
  }

  function showQueues(data, retrying) {
    const sums = Object.fromEntries(STATES.map((state) => [state, 0]));
    for (const counts of Object.values(data)) for (const state of STATES) sums[state] += counts[state] || 0;
    totals.update({...sums, retrying});
    const names = Object.keys(data);
    nothing.hidden = names.length > 0;
    reconcile(queues.body, names, (name) => name, () => row(columns.length, columns.map((c) => c[1])),
      (tr, name) => {
        const counts = data[name];
        const cells = tr.children;
        if (!cells[0].firstChild) cells[0].append(link(`/dashboard/queues/${encodeURIComponent(name)}`, name));
        const mark = cells[0].querySelector(".paused");
        if (counts.paused && !mark) cells[0].append(h("span", {class: "badge paused", text: "paused"}));
        else if (!counts.paused && mark) mark.remove();
        STATES.forEach((state, i) => {
          const cell = cells[i + 1];
          if (!cell.firstChild) cell.append(link(`/dashboard/jobs?queue=${encodeURIComponent(name)}&state=${state}`, ""));
          setText(cell.firstChild, count(counts[state]));
          cell.classList.toggle("zero", !counts[state]);
          cell.classList.toggle("alarm", state === "dead" && counts[state] > 0);
        });
        setText(cells[STATES.length + 1], counts.oldest_wait ? duration(counts.oldest_wait) : "—");
      });
  }

  function showStore(report) {
    setText(store.number, report.up ? "up" : "down");
    store.el.dataset.health = report.up ? "up" : "down";
    setText(store.small, report.up ? `${report.kind} · ${ms(report.latency_ms)}` : `${report.kind}: ${report.error}`);
    if (report.up) ctx.clearBanner();
    else ctx.storeTrouble({code: "store_unavailable", message: report.error});
  }

  function showWorkers(report) {
    const busy = report.workers.reduce((n, w) => n + w.jobs.length, 0);
    const slots = report.workers.reduce((n, w) => n + (w.concurrency || 0), 0);
    setText(workers.number, count(report.workers.length));
    setText(workers.small, report.workers.length ? `${busy}/${slots} busy` +
      (report.masters.length ? ` · ${report.masters.length} master${report.masters.length > 1 ? "s" : ""}` : "") :
      "start one: deferq worker");
  }

  function showLoad(load) {
    server.el.hidden = !load.max_inflight;
    const busy = Object.values(load.shed).reduce((n, c) => n + c, 0);
    setText(server.number, `${count(load.inflight)}/${count(load.max_inflight)}`);
    const waiting = load.overload === "shed-oldest" ? ` · ${count(load.waiting)} waiting` : "";
    setText(server.small, `in flight · ${load.overload}${waiting} · ${count(busy)} busy`);
    if (busy || load.waiting) server.el.dataset.health = "warn";
    else delete server.el.dataset.health;
  }

  return {refresh, unmount: () => charts.destroy()};
}
