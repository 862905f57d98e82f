// /dashboard/queues/{queue}?state=: one queue's counts, its history (last hour or day), its
// workers, its jobs; pause and resume it (admin).

import {query} from "../api.js";
import {code, empty, h, link, note, setText} from "../dom.js";
import {FILTER_STATES, compact, count} from "../format.js";
import {historyPanel} from "../history.js";
import {rowActions} from "./actions.js";
import {card, messageLine, pageHead, retryingCount, stateCards} from "./common.js";
import {jobTable} from "./jobtable.js";

const LIMIT = 25;

export function mount(root, ctx) {
  const name = ctx.params[0];
  const base = `/dashboard/queues/${encodeURIComponent(name)}`;
  let state = ctx.query.get("state") || "";
  const toggle = h("button", {type: "button", id: "pause-queue", hidden: true});
  const pausedBadge = h("span", {class: "badge paused", id: "queue-paused", text: "paused", hidden: true});
  const head = pageHead(`Queue ${name}`, toggle);
  head.heading.after(pausedBadge);
  const message = messageLine();
  let paused = null;
  const cards = stateCards((s) => `${base}?state=${s}`, FILTER_STATES);
  const oldest = card("oldest wait");
  const workers = card("workers on it");
  const charts = historyPanel(ctx, name);
  const listTitle = h("h2");
  const more = h("p", {class: "muted count-line"});
  const jobs = jobTable({extra: ctx.can("producer") ? rowActions(ctx, message, () => refresh()) : null});
  const nothing = h("div");
  const missing = empty(`No queue named ${name}.`, "A queue exists once a job was enqueued to it. ",
    link("See every queue", "/dashboard/"));
  missing.hidden = true;
  root.append(head.el, message.el, missing, h("div", {class: "overview-top"}, cards.el, h("div", {class: "cards side"}, oldest.el,
    workers.el)), charts.el, h("section", {class: "panel"}, listTitle, more, jobs.el, nothing),
  note("A paused queue takes new jobs, but no worker starts one of them until it is resumed; jobs already ",
    "running finish. The pause is kept in the store, so it holds across restarts. The API: ",
    code(`POST /v1/queues/${name}/pause`), ", ", code(`POST /v1/queues/${name}/resume`), "."));
  let counts = null;

  function showPaused(now) {
    paused = now;
    pausedBadge.hidden = !now;
    toggle.hidden = !ctx.can("admin");
    toggle.className = now ? "primary" : "";
    setText(toggle, now ? "Resume" : "Pause");
  }

  toggle.addEventListener("click", async () => {
    const action = paused ? "resume" : "pause";
    if (!paused && !(await ctx.confirm({title: `Pause queue ${name}?`, action: "Pause it",
      body: ["Workers stop taking its jobs until you resume it; new jobs still wait in it, and jobs already " +
        "running finish."]}))) return;
    toggle.disabled = true;
    message.clear();
    try {
      const done = await ctx.api(`/v1/queues/${encodeURIComponent(name)}/${action}`, {method: "POST"});
      showPaused(done.paused);
      ctx.toast(done.paused ? `Queue ${name} is paused.` : `Queue ${name} runs again.`, "ok");
    } catch (error) {
      message.show(`Could not ${action} ${name}: ${error.message}`);
    }
    toggle.disabled = false;
    refresh();
  });

  function select(next) {
    state = next;
    for (const a of cards.el.querySelectorAll("a")) a.classList.toggle("selected", a.dataset.state === state);
  }

  async function refresh() {
    const [q, w, r] = await Promise.allSettled([ctx.api("/v1/queues"), ctx.api("/v1/workers"),
      retryingCount(ctx, name), charts.refresh()]);
    if (!ctx.alive()) return;
    if (q.status === "fulfilled") {
      counts = q.value.queues[name] || null;
      missing.hidden = counts !== null;
      if (!toggle.disabled) showPaused(Boolean(counts && counts.paused));
      cards.update({...(counts || {}), retrying: r.status === "fulfilled" ? r.value : null});
      setText(oldest.number, counts && counts.oldest_wait ? compact(counts.oldest_wait) : "—");
    }
    if (w.status === "fulfilled") {
      const mine = w.value.workers.filter((worker) => worker.queues.includes(name));
      setText(workers.number, count(mine.length));
      setText(workers.small, `${mine.reduce((n, x) => n + x.jobs.length, 0)} running`);
    }
    if (!state && counts) state = ["active", "queued", "scheduled", "dead"].find((s) => counts[s]) || "queued";
    if (!state) state = "queued";
    select(state);
    const shown = state;
    setText(listTitle, `${state} jobs`);
    const data = await ctx.api(`/v1/jobs${query({state, queue: name, limit: LIMIT})}`);
    if (!ctx.alive() || shown !== state) return;
    jobs.update(data.jobs);
    const total = counts && state !== "retrying" ? counts[state] || 0 : data.jobs.length;
    more.replaceChildren(total > data.jobs.length ?
      h("span", {}, `The newest ${data.jobs.length} of ${count(total)}. `,
        link(`/dashboard/jobs${query({queue: name, state})}`, "Filter them on the Jobs page")) :
      `${count(data.jobs.length)} ${state} job(s).`);
    nothing.replaceChildren(data.jobs.length ? "" :
      empty(`No ${state} jobs in ${name}.`, "Pick another state above."));
    head.updated();
  }

  return {
    refresh,
    update(params) {
      select(params.get("state") || "");
      refresh();
    },
    unmount: () => charts.destroy(),
  };
}
