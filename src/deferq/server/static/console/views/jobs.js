// /dashboard/jobs?state=&queue=&task=&q=&cursor=: a page of the jobs that match a filter,
// newest first, from GET /v1/jobs (keyset pages: the same cost on page 1 and page 10,000;
// the cursor in the URL, so a reload or the back button keeps the page).

import {query} from "../api.js";
import {code, empty, h, link, note} from "../dom.js";
import {count} from "../format.js";
import {pageHead} from "./common.js";
import {filterForm} from "./filters.js";
import {jobTable} from "./jobtable.js";

const LIMIT = 50;
const FIELDS = ["state", "queue", "task", "q"];

export function mount(root, ctx) {
  let params = ctx.query;
  const head = pageHead("Jobs");
  const form = filterForm(ctx, FIELDS, {task: "task (its name)", q: "id, key or text"});
  const summary = h("p", {class: "muted count-line", "data-testid": "jobs-summary"});
  const jobs = jobTable();
  const nothing = h("div");
  const newest = h("a", {class: "button-like", text: "← Newest"});
  const older = h("a", {class: "button-like", rel: "next", text: "Older →"});
  const pager = h("nav", {class: "pager", "aria-label": "pages"}, newest, older);
  root.append(head.el, h("section", {class: "panel"}, form.el, summary, jobs.el, nothing, pager),
    note("Newest first, ", LIMIT, " a page. The search box finds a job by its id or unique key, however old, ",
      "and text (3 characters or more) in arguments and errors: through the store's text index on SQLite and ",
      "PostgreSQL; on MySQL and Redis among the newest jobs only, as the line above the list says. The API: ",
      code("GET /v1/jobs"), "."));

  function filterOf(p) {
    return Object.fromEntries(FIELDS.map((f) => [f, p.get(f)]));
  }

  async function refresh() {
    const wanted = params.toString();
    const [queues, data] = await Promise.all([ctx.api("/v1/queues"),
      ctx.api(`/v1/jobs${query({...filterOf(params), cursor: params.get("cursor"), limit: LIMIT})}`)]);
    if (!ctx.alive() || wanted !== params.toString()) return;
    form.queues(Object.keys(queues.queues));
    form.tasks([...new Set(data.jobs.map((job) => job.task).filter(Boolean))]);
    jobs.update(data.jobs);
    summary.textContent = describe(data, Boolean(params.get("cursor")));
    const filtered = FIELDS.some((name) => params.get(name));
    nothing.replaceChildren(data.jobs.length ? "" : filtered ?
      empty("No job matches this filter.", "Clear the filter, or widen it (any state, any queue).") :
      params.get("cursor") ? empty("No older jobs.", link(location.pathname, "Back to the newest")) :
        empty("No jobs yet.", "Enqueue one with POST /v1/jobs, or task.enqueue() in Python; it shows up here."));
    const base = new URLSearchParams(query(filterOf(params)));
    newest.hidden = !params.get("cursor");
    newest.href = `${location.pathname}${base.toString() ? `?${base}` : ""}`;
    older.hidden = !data.cursor;
    if (data.cursor) {
      base.set("cursor", data.cursor);
      older.href = `${location.pathname}?${base}`;
    }
    head.updated();
  }

  return {
    refresh,
    update(next) {
      params = next;
      form.sync(next);
      window.scrollTo(0, 0);
      refresh();
    },
  };
}

// What the page shows and how `q` was searched, in words: never pretend to have
// searched everything.
function describe(data, later) {
  const shown = `${count(data.jobs.length)} job(s)${later ? " on this page" : ""}`;
  const search = data.search;
  if (!search) return `${shown}, newest first.`;
  const parts = [shown];
  if (search.exact) parts.push(`${search.exact} found by id or key`);
  if (search.text === "index") parts.push("text searched through the store's index (every job)");
  else if (search.text === "words") parts.push("text searched as whole words through the store's index (every job)");
  else if (search.text === "scan") {
    parts.push(search.complete ? `text looked for in every job (${count(search.scanned)})` :
      `text looked for among the newest ${count(search.scanned)} jobs only: this store has no text index, ` +
      "older jobs were not searched");
  } else parts.push("too short for a text search (3 characters or more): id and key only");
  return `${parts.join("; ")}.`;
}
