// /dashboard/dead?queue=&task=&q=: dead letters; retry one, retry or delete all that
// match, or delete dead letters by age (every action on many jobs asks first).

import {query} from "../api.js";
import {code, h, note} from "../dom.js";
import {count} from "../format.js";
import {messageLine, pageHead} from "./common.js";
import {searchList} from "./filters.js";

const LIMIT = 100;
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
  const list = searchList(ctx, {
    fields: ["queue", "task", "q"], fixed: {state: "dead"}, what: "dead letter(s)",
    extra: admin ? (job) => retryButton(job) : null,
    emptyFiltered: ["No dead letter matches this filter.", "Clear the filter to see every dead letter."],
    emptyAll: ["No dead letters.", "Nothing has run out of attempts. Jobs that do will wait here to be retried."],
  });
  root.append(head.el,
    h("section", {class: "panel"}, list.form, admin ? h("div", {class: "actions"}, retryAll, deleteAll, purge) : null,
      message.el, list.list),
    note("Jobs land here when their attempts run out, or when they cannot run at all (an unknown task). ",
      "“Delete all that match” deletes what the filter shows; “Delete by age” every queue's older ones. ",
      "The API: ", code("GET /v1/search?state=dead"), ", ", code("POST /v1/dead/retry"), ", ",
      code("POST /v1/dead/retry-batch"), ", ", code("POST /v1/dead/delete-batch"), ", ", code("DELETE /v1/dead"),
      "."));
  let last = null;

  function retryButton(job) {
    const button = h("button", {type: "button", class: "small", text: "Retry"});
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        await ctx.api(`/v1/dead/${encodeURIComponent(job.id)}/retry`, {method: "POST"});
        ctx.toast(`Job ${job.id} is queued again.`, "ok");
      } catch (error) {
        message.show(`Could not retry ${job.id}: ${error.message}`);
      }
      refresh();
    });
    return button;
  }

  // What the filter matches, in words: "every dead letter of queue q (12 now)" or "the 3 ... that match".
  function matching() {
    const params = list.params();
    const queueOnly = !params.get("task") && !params.get("q");
    const where = params.get("queue") ? `of queue ${params.get("queue")}` : "of every queue";
    const what = queueOnly ? `every dead letter ${where} (${count(last.matched)} now)` :
      `the ${count(last.matched)} dead letter(s) that match`;
    return {params, queueOnly, what};
  }

  // Act on every match in rounds of ids: each round lets older matches into the search's window.
  async function eachRound(path, counted) {
    let done = 0;
    for (let round = 0; round < 50; round++) {
      const found = await list.search(BATCH);
      if (!found.jobs.length) break;
      const answer = await ctx.api(path, {method: "POST", body: {ids: found.jobs.map((j) => j.id)}});
      done += answer[counted];
      if (!answer[counted]) break;
    }
    return done;
  }

  retryAll.addEventListener("click", async () => {
    if (!last || !last.matched) return;
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
        retried = await eachRound("/v1/dead/retry-batch", "retried");
      }
      ctx.toast(`${count(retried)} dead letter(s) queued again.`, "ok");
    } catch (error) {
      message.show(`Retrying stopped: ${error.message}`);
    }
    refresh();
  });

  deleteAll.addEventListener("click", async () => {
    if (!last || !last.matched) return;
    const sure = await ctx.confirm({title: "Delete dead letters?", action: "Delete them", danger: true,
      typed: "delete", body: [`This deletes ${matching().what} for good: they cannot be retried afterwards.`]});
    if (!sure) return;
    message.clear();
    try {
      const deleted = await eachRound("/v1/dead/delete-batch", "deleted");
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
    const shown = await list.refresh(LIMIT);
    if (!shown) return;
    last = shown.data;
    retryAll.disabled = !last.matched;
    retryAll.textContent = last.matched ? `Retry all that match (${count(last.matched)})` : "Retry all that match";
    deleteAll.disabled = !last.matched;
    deleteAll.textContent = last.matched ? `Delete all that match (${count(last.matched)})` : "Delete all that match";
    purge.disabled = !Object.values(shown.queues).some((q) => q.dead);
    head.updated();
  }

  return {
    refresh,
    update(next) {
      list.update(next);
      refresh();
    },
  };
}
