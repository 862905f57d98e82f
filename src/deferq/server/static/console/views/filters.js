// The filter form of the jobs and dead views. The URL holds the filter (deep links,
// reload, back button); typing updates it after a pause, without rebuilding the form.

import {query} from "../api.js";
import {debounce, empty, h} from "../dom.js";
import {STATES, count} from "../format.js";
import {queueSelect, stateSelect} from "./common.js";
import {jobTable} from "./jobtable.js";

// fields: which of state, queue, task, q the form shows; hints: placeholders of task and q.
export function filterForm(ctx, fields, hints) {
  const hint = {task: "task or topic contains…", q: "id or key", ...hints};
  const values = () => Object.fromEntries(fields.map((f) => [f, ctx.query.get(f) || ""]));
  const start = values();
  const queue = queueSelect("queue", start.queue);
  const controls = {
    state: fields.includes("state") ? stateSelect("state", start.state) : null,
    queue: fields.includes("queue") ? queue.el : null,
    task: fields.includes("task") ? h("input", {name: "task", type: "search", value: start.task,
      placeholder: hint.task, list: "known-tasks", "aria-label": "task", autocomplete: "off"}) : null,
    q: fields.includes("q") ? h("input", {name: "q", type: "search", value: start.q,
      placeholder: hint.q, "aria-label": hint.q, autocomplete: "off", spellcheck: "false"}) : null,
  };
  const tasks = h("datalist", {id: "known-tasks"});
  const clear = h("a", {href: location.pathname, class: "button-like", text: "Clear"});
  const form = h("form", {class: "filters", role: "search"}, Object.values(controls), tasks,
    h("button", {type: "submit", text: "Filter"}), clear);

  function apply(replace) {
    const params = new URLSearchParams();
    for (const [name, control] of Object.entries(controls)) {
      if (control && control.value.trim()) params.set(name, control.value.trim());
    }
    const url = `${location.pathname}${params.toString() ? `?${params}` : ""}`;
    if (url !== location.pathname + location.search) ctx.navigate(url, {replace});
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    apply(false);
  });
  for (const control of [controls.state, controls.queue]) control && control.addEventListener("change", () => apply(false));
  const typed = debounce(() => apply(true), 500);
  for (const control of [controls.task, controls.q]) control && control.addEventListener("input", typed);

  return {
    el: form,
    values: () => Object.fromEntries(Object.entries(controls).filter(([, c]) => c).map(([n, c]) => [n, c.value.trim()])),
    queues: (names) => queue.update(names),
    tasks(names) {
      const have = new Set(Array.from(tasks.options).map((o) => o.value));
      for (const name of names) if (!have.has(name)) tasks.append(h("option", {value: name}));
    },
    // The URL changed (back button): show its filter unless the person is typing in it.
    sync(params) {
      for (const [name, control] of Object.entries(controls)) {
        if (control && document.activeElement !== control) control.value = params.get(name) || "";
      }
    },
  };
}

// A filtered job list (GET /v1/search): the form, a line saying what was searched, the
// rows and an empty state. `fixed`: parameters the page always sends (state=dead).
export function searchList(ctx, {fields, fixed, what, extra, emptyFiltered, emptyAll}) {
  let params = ctx.query;
  const form = filterForm(ctx, fields);
  const summary = h("p", {class: "muted count-line"});
  const jobs = jobTable({extra});
  const nothing = h("div");
  const list = h("div", {}, summary, jobs.el, nothing);
  return {
    form: form.el,
    list,
    params: () => params,
    // Without task or id/key text the store's counts say how many match, so only the
    // newest `limit` jobs of each state are read; with text, a window of each state is.
    search: (limit) => {
      const text = params.get("task") || params.get("q");
      return ctx.api(`/v1/search${query({...fixed, ...Object.fromEntries(fields.map((f) => [f, params.get(f)])),
        limit, window: text ? null : limit})}`);
    },
    // The list for the filter in the URL: {queues, data}, or null when the filter changed meanwhile.
    async refresh(limit) {
      const wanted = params.toString();
      const [queues, data] = await Promise.all([ctx.api("/v1/queues"), this.search(limit)]);
      if (!ctx.alive() || wanted !== params.toString()) return null;
      form.queues(Object.keys(queues.queues));
      form.tasks(data.tasks || []);
      jobs.update(data.jobs);
      const text = params.get("task") || params.get("q");
      summary.textContent = text ? searchSummary(data, data.jobs.length, what) :
        countSummary(queues.queues, {...fixed, queue: params.get("queue"), state: fixed && fixed.state ||
          params.get("state")}, data.jobs.length, what);
      const filtered = fields.some((name) => params.get(name));
      nothing.replaceChildren(data.jobs.length ? "" : filtered ? empty(...emptyFiltered) : empty(...emptyAll));
      return {queues: queues.queues, data};
    },
    update(next) {
      params = next;
      form.sync(next);
    },
  };
}

// How many jobs the filter (state, queue) holds, from the store's counts.
function countSummary(queues, {state, queue}, shown, what) {
  let total = 0;
  for (const [name, counts] of Object.entries(queues)) {
    if (queue && name !== queue) continue;
    for (const s of state ? [state] : STATES) total += counts[s] || 0;
  }
  const noun = what || "job(s)";
  return total > shown ? `${count(total)} ${noun}; the newest ${shown} are shown (paging further back is a ` +
    "later store feature; a task or id/key filter looks at the newest 1,000 of each state)." :
    `${count(total)} ${noun}.`;
}

// What GET /v1/search looked at, in words: the page must not pretend to search everything.
export function searchSummary(data, shown, what) {
  const parts = [`${count(data.matched)} ${what || "job(s)"} match`];
  if (data.matched > shown) parts.push(` (the first ${shown} shown)`);
  parts.push(data.complete ?
    `; every job in these states was looked at (${count(data.scanned)}).` :
    `, among the newest ${count(data.window)} jobs of each state (${count(data.scanned)} looked at). ` +
      "Older jobs are not searched, except an exact id or key, which is always found.");
  return parts.join("");
}
