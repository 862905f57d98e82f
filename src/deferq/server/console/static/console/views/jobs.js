// /dashboard/jobs?state=&queue=&task=&tag=&chunk=&q=&cursor=: a page of the jobs that match a filter,
// newest first, from GET /v1/jobs (filters.js: keyset pages, the cursor in the URL); each
// row's actions, and checked rows (or all that match) retried, cancelled or deleted at once.

import {code, h, note} from "../dom.js";
import {count} from "../format.js";
import {bulkBar, rowActions} from "./actions.js";
import {messageLine, pageHead} from "./common.js";
import {pagedList, searchWords} from "./filters.js";

const LIMIT = 50;

export function mount(root, ctx) {
  const head = pageHead("Jobs");
  const message = messageLine();
  const selected = new Set();
  const acts = ctx.can("producer");
  const list = pagedList(ctx, {
    fields: ["state", "queue", "task", "tag", "chunk", "q"], limit: LIMIT,
    hints: {task: "task (its name)", tag: "tag (exact)", q: "id, key or text"},
    describe, select: acts ? selected : null, onSelect: () => bulk.show(),
    extra: acts ? rowActions(ctx, message, () => refresh()) : null,
    emptyFiltered: ["No job matches this filter.", "Clear the filter, or widen it (any state, any queue)."],
    emptyAll: ["No jobs yet.", "Enqueue one with POST /v1/jobs, or task.enqueue() in Python; it shows up here."],
  });
  const bulk = bulkBar(ctx, {list, selected, message, after: () => refresh()});
  root.append(head.el, h("section", {class: "panel"}, list.form, bulk.el, message.el, list.list),
    note("Newest first, ", LIMIT, " a page. The search box finds a job by its id or unique key, however old, ",
      "and text (3 characters or more) in arguments and errors: through the store's text index on SQLite and ",
      "PostgreSQL; on MySQL and Redis among the newest jobs only, as the line above the list says. ",
      "“retrying”: scheduled jobs that failed before and wait for their next attempt; “waiting”: scheduled ",
      "jobs in a durable wait, until its event or timeout. The API: ",
      code("GET /v1/jobs"), ", ", code("POST /v1/jobs/cancel-batch"), ", ", code("POST /v1/jobs/delete-batch"), "."));

  async function refresh() {
    if (await list.refresh()) head.updated();
    bulk.show();
  }

  return {
    refresh,
    update(next) {
      selected.clear();
      bulk.reset();
      list.update(next);
      refresh();
    },
  };
}

// What the page shows and how `q` was searched, in words.
function describe(data, later) {
  const shown = `${count(data.jobs.length)} job(s)${later ? " on this page" : ""}`;
  const search = searchWords(data.search);
  return search ? `${shown}; ${search}.` : `${shown}, newest first.`;
}
