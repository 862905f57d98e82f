// The filter form of the jobs and dead views. The URL holds the filter (deep links,
// reload, back button); typing updates it after a pause, without rebuilding the form.

import {query} from "../api.js";
import {debounce, empty, h, link} from "../dom.js";
import {count} from "../format.js";
import {queueSelect, stateSelect} from "./common.js";
import {jobTable} from "./jobtable.js";

// fields: which of state, queue, task, tag, chunk, q the form shows; hints: placeholders of task and
// q. The chunk call's box shows only while the URL filters by one (the job page links there).
export function filterForm(ctx, fields, hints) {
  const hint = {task: "task or topic contains…", tag: "tag", q: "id or key", ...hints};
  const values = () => Object.fromEntries(fields.map((f) => [f, ctx.query.get(f) || ""]));
  const start = values();
  const queue = queueSelect("queue", start.queue);
  const controls = {
    state: fields.includes("state") ? stateSelect("state", start.state) : null,
    queue: fields.includes("queue") ? queue.el : null,
    task: fields.includes("task") ? h("input", {name: "task", type: "search", value: start.task,
      placeholder: hint.task, list: "known-tasks", "aria-label": "task", autocomplete: "off"}) : null,
    tag: fields.includes("tag") ? h("input", {name: "tag", type: "search", value: start.tag,
      placeholder: hint.tag, "aria-label": "tag", autocomplete: "off", spellcheck: "false"}) : null,
    chunk: fields.includes("chunk") && start.chunk ? h("input", {name: "chunk", type: "search", value: start.chunk,
      placeholder: "chunk call", "aria-label": "chunk call", title: "chunk call", autocomplete: "off",
      spellcheck: "false", class: "mono"}) : null,
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
  for (const control of [controls.task, controls.tag, controls.chunk, controls.q]) {
    if (control) control.addEventListener("input", typed);
  }

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

// A filtered job list a page at a time (GET /v1/jobs: keyset pages, newest first, the same
// cost on page 1 and page 10,000; the cursor in the URL, so a reload or the back button
// keeps the page): the form, a line saying what was searched (`describe(data, later)`), the
// rows, an empty state and the pager. `fixed`: parameters the page always sends (state=dead).
// `select`, `onSelect`, `extra`: jobTable's options (checkboxes, a row's actions).
export function pagedList(ctx, {fields, fixed, limit, hints, extra, select, onSelect, describe, emptyFiltered, emptyAll}) {
  let params = ctx.query;
  const form = filterForm(ctx, fields, hints);
  const summary = h("p", {class: "muted count-line", "data-testid": "jobs-summary"});
  const jobs = jobTable({extra, select, onSelect});
  const nothing = h("div");
  const newest = h("a", {class: "button-like", text: "← Newest"});
  const older = h("a", {class: "button-like", rel: "next", text: "Older →"});
  const pager = h("nav", {class: "pager", "aria-label": "pages"}, newest, older);
  const filter = (p) => ({...fixed, ...Object.fromEntries(fields.map((f) => [f, p.get(f)]))});
  const page = (cursor, size) => ctx.api(`/v1/jobs${query({...filter(params), cursor, limit: size})}`);
  return {
    form: form.el,
    list: h("div", {}, summary, jobs.el, nothing, pager),
    params: () => params,
    filtered: () => fields.some((name) => params.get(name)),
    // Every job the filter matches, `size` at a time, following the cursors to the end.
    async* matches(size) {
      let cursor = null;
      for (let round = 0; round < 100_000; round++) {
        const data = await page(cursor, size);
        if (data.jobs.length) yield data.jobs;
        if (!data.cursor) return;
        cursor = data.cursor;
      }
    },
    // The page in the URL: {queues, data}, or null when the filter changed meanwhile.
    async refresh() {
      const wanted = params.toString();
      const [queues, data] = await Promise.all([ctx.api("/v1/queues"), page(params.get("cursor"), limit)]);
      if (!ctx.alive() || wanted !== params.toString()) return null;
      form.queues(Object.keys(queues.queues));
      form.tasks([...new Set(data.jobs.map((job) => job.task).filter(Boolean))]);
      jobs.update(data.jobs);
      const later = Boolean(params.get("cursor"));
      summary.textContent = describe(data, later, queues.queues);
      nothing.replaceChildren(data.jobs.length ? "" : this.filtered() ? empty(...emptyFiltered) :
        later ? empty("No older jobs.", link(location.pathname, "Back to the newest")) : empty(...emptyAll));
      const base = new URLSearchParams(query(Object.fromEntries(fields.map((f) => [f, params.get(f)]))));
      newest.hidden = !later;
      newest.href = `${location.pathname}${base.toString() ? `?${base}` : ""}`;
      older.hidden = !data.cursor;
      if (data.cursor) {
        base.set("cursor", data.cursor);
        older.href = `${location.pathname}?${base}`;
      }
      return {queues: queues.queues, data};
    },
    update(next) {
      params = next;
      form.sync(next);
      window.scrollTo(0, 0);
    },
  };
}

// How `q` was searched (GET /v1/jobs's `search`), in words: never pretend to have searched
// everything. Null when there was no `q`.
export function searchWords(search) {
  if (!search) return null;
  const parts = [];
  if (search.exact) parts.push(`${search.exact} found by id or key`);
  if (search.text === "index") parts.push("text searched through the store's index (every job)");
  else if (search.text === "words") parts.push("text searched as whole words through the store's index (every job)");
  else if (search.text === "scan") {
    parts.push(search.complete ? `text looked for in every job (${count(search.scanned)})` :
      `text looked for among the newest ${count(search.scanned)} jobs only: this store has no text index, ` +
      "older jobs were not searched");
  } else parts.push("too short for a text search (3 characters or more): id and key only");
  return parts.join("; ");
}
