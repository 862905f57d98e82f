// /dashboard/dead?queue=&task=&q=&cursor=: dead letters a page at a time (GET /v1/jobs,
// keyset pages like /dashboard/jobs); retry or delete one, the checked ones, or all that
// match (every page of the filter), or dead letters by age (every action on many asks first).

import {query} from "../api.js";
import {code, h, note} from "../dom.js";
import {count} from "../format.js";
import {bulkBar, rowActions} from "./actions.js";
import {messageLine, pageHead} from "./common.js";
import {pagedList, searchWords} from "./filters.js";

const LIMIT = 50;
const BATCH = 1000; // ids per POST /v1/dead/retry-batch or /v1/dead/delete-batch
const AGES = [["0", "all of them"], ["3600", "older than an hour"], ["86400", "older than a day"],
  ["604800", "older than a week"]];

export function mount(root, ctx) {
  const admin = ctx.can("admin");
  const head = pageHead("Dead letters");
  const message = messageLine();
  const retryAll = h("button", {type: "button", class: "primary", id: "retry-matching", text: "Retry all that match"});
  const deleteAll = h("button", {type: "button", class: "danger", id: "delete-matching",
    text: "Delete all that match"});
  const purge = h("button", {type: "button", id: "delete-dead", text: "Delete by age…"});
  let known = null; // how many match, when that is known: {count, exact}
  const selected = new Set();
  const list = pagedList(ctx, {
    fields: ["queue", "task", "q"], fixed: {state: "dead"}, limit: LIMIT,
    hints: {task: "task (its name)", q: "id, key or text"},
    extra: admin ? rowActions(ctx, message, () => refresh()) : null, describe,
    select: admin ? selected : null, onSelect: () => bulk.show(),
    emptyFiltered: ["No dead letter matches this filter.", "Clear the filter to see every dead letter."],
    emptyAll: ["No dead letters.", "Nothing has run out of attempts. Jobs that do will wait here to be retried."],
  });
  const bulk = bulkBar(ctx, {list, selected, message, after: () => refresh(), offered: ["retry", "delete"]});
  root.append(head.el,
    h("section", {class: "panel"}, list.form, admin ? h("div", {class: "actions"}, retryAll, deleteAll, purge) : null,
      bulk.el, message.el, list.list),
    note("Jobs land here when their attempts run out, or when they cannot run at all (an unknown task). Newest ",
      "first, ", LIMIT, " a page. “Retry all that match” and “Delete all that match” act on every page of the ",
      "filter; “Delete by age” on every queue's older ones. The API: ", code("GET /v1/jobs?state=dead"), ", ",
      code("POST /v1/dead/retry"), ", ", code("POST /v1/dead/retry-batch"), ", ",
      code("POST /v1/dead/delete-batch"), ", ", code("DELETE /v1/dead"), "."));

  // The count line; also learns how many match: the store's count without task or text, else
  // the first page's length when it is the only page.
  function describe(data, later, queues) {
    const params = list.params();
    const queueOnly = !params.get("task") && !params.get("q");
    if (queueOnly) {
      const total = Object.entries(queues).reduce((sum, [name, counts]) =>
        sum + (!params.get("queue") || name === params.get("queue") ? counts.dead || 0 : 0), 0);
      known = {count: total, exact: true};
      return `${count(total)} dead letter(s)${total > data.jobs.length ? `; ${count(data.jobs.length)} on this page` +
        ", newest first" : ""}.`;
    }
    known = later ? null : {count: data.jobs.length, exact: !data.cursor};
    const search = searchWords(data.search);
    const shown = `${count(data.jobs.length)} dead letter(s) match${later ? " on this page" : ""}` +
      (data.cursor ? " (more on older pages)" : "");
    return search ? `${shown}; ${search}.` : `${shown}.`;
  }

  // What the filter matches, in words: "every dead letter of queue q (12 now)" or "the 3 ... that match".
  function matching() {
    const params = list.params();
    const queueOnly = !params.get("task") && !params.get("q");
    const where = params.get("queue") ? `of queue ${params.get("queue")}` : "of every queue";
    const what = queueOnly ? `every dead letter ${where} (${count(known.count)} now)` :
      known && known.exact ? `the ${count(known.count)} dead letter(s) that match` :
        "every dead letter that matches this filter, on every page";
    return {params, queueOnly, what};
  }

  // Act on every match, a page of ids at a time, following the filter's cursor to its end.
  async function everyPage(path, counted) {
    let done = 0;
    for await (const jobs of list.matches(BATCH)) {
      const answer = await ctx.api(path, {method: "POST", body: {ids: jobs.map((j) => j.id)}});
      done += answer[counted];
    }
    return done;
  }

  retryAll.addEventListener("click", async () => {
    if (known && !known.count) return;
    const {params, queueOnly, what} = matching();
    const sure = await ctx.confirm({title: "Retry dead letters?", action: "Retry them",
      body: [`This queues ${what} again, with fresh attempts.`]});
    if (!sure) return;
    message.clear();
    try {
      let retried = 0;
      if (queueOnly) {
        retried = (await ctx.api(`/v1/dead/retry${query({queue: params.get("queue")})}`, {method: "POST"})).retried;
      } else {
        retried = await everyPage("/v1/dead/retry-batch", "retried");
      }
      ctx.toast(`${count(retried)} dead letter(s) queued again.`, "ok");
    } catch (error) {
      message.show(`Retrying stopped: ${error.message}`);
    }
    refresh();
  });

  deleteAll.addEventListener("click", async () => {
    if (known && !known.count) return;
    const sure = await ctx.confirm({title: "Delete dead letters?", action: "Delete them", danger: true,
      typed: "delete", body: [`This deletes ${matching().what} for good: they cannot be retried afterwards.`]});
    if (!sure) return;
    message.clear();
    try {
      const deleted = await everyPage("/v1/dead/delete-batch", "deleted");
      ctx.toast(`${count(deleted)} dead letter(s) deleted.`, "ok");
    } catch (error) {
      message.show(`Deleting stopped: ${error.message}`);
    }
    refresh();
  });

  purge.addEventListener("click", async () => {
    const age = h("select", {"aria-label": "which dead letters"},
      AGES.map(([value, label]) => h("option", {value, text: label})));
    const sure = await ctx.confirm({
      title: "Delete dead letters?", action: "Delete", danger: true, typed: "delete",
      body: ["This deletes dead letters of every queue, whatever the filter shows: they cannot be retried " +
        "afterwards. Which ones:", age],
    });
    if (!sure) return;
    message.clear();
    try {
      const done = await ctx.api(`/v1/dead${query({older_than: age.value === "0" ? null : age.value})}`,
        {method: "DELETE"});
      ctx.toast(`${count(done.purged)} dead letter(s) deleted.`, "ok");
    } catch (error) {
      message.show(`Could not delete: ${error.message}`);
    }
    refresh();
  });

  async function refresh() {
    const shown = await list.refresh();
    if (!shown) return;
    const none = Boolean(known && !known.count);
    const label = known && known.exact && known.count ? ` (${count(known.count)})` : "";
    retryAll.disabled = deleteAll.disabled = none;
    retryAll.textContent = `Retry all that match${label}`;
    deleteAll.textContent = `Delete all that match${label}`;
    purge.disabled = !Object.values(shown.queues).some((q) => q.dead);
    bulk.show();
    head.updated();
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
