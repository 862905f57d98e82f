// What can be done to jobs from a list or a job's page: one job's actions (retry, run
// now, cancel, delete: each only where its state and the token's scope allow it), and
// the bar that acts on the checked rows, or on every job the filter matches.

import {query} from "../api.js";
import {h} from "../dom.js";
import {count} from "../format.js";
import {jobName} from "./common.js";

const BATCH = 1000; // ids per batch request
const WAITING = ["blocked", "scheduled", "queued"];
const FINISHED = ["succeeded", "dead", "cancelled"];

// Which actions a job in `state` offers this token: [name, label, class].
export function actionsFor(ctx, state) {
  const found = [];
  if (state === "dead" && ctx.can("admin")) found.push(["retry", "Retry", "primary"]);
  if (state === "scheduled" && ctx.can("producer")) found.push(["run-now", "Run now", ""]);
  if ((WAITING.includes(state) || state === "active") && ctx.can("producer")) {
    found.push(["cancel", state === "active" ? "Stop" : "Cancel", "danger"]);
  }
  if (FINISHED.includes(state) && ctx.can("admin")) found.push(["delete", "Delete", "danger"]);
  return found;
}

// Ask for a reason (optional) and confirm; null when the person backs out.
async function reasonFor(ctx, title, body, action) {
  const reason = h("input", {type: "text", maxlength: 300, name: "reason", autocomplete: "off",
    placeholder: "why (optional): kept in the remark with your token and the time"});
  const sure = await ctx.confirm({title, action, danger: true,
    body: [...body, h("label", {}, "Reason", reason)]});
  return sure ? reason.value.trim() : null;
}

// Cancel (or stop, when it runs) one job after asking why: true when the API agreed.
export async function cancelJob(ctx, job) {
  const running = job.state === "active";
  const reason = await reasonFor(ctx, running ? "Stop this running job?" : "Cancel this job?",
    [running ? `${jobName(job)} ${job.id} is asked to stop: it ends cancelled at its worker's next heartbeat.` :
      `${jobName(job)} ${job.id} will not run. A cancelled job cannot be started again.`],
    running ? "Stop the job" : "Cancel the job");
  if (reason === null) return false;
  await ctx.api(`/v1/jobs/${encodeURIComponent(job.id)}${query({via: "console", reason})}`, {method: "DELETE"});
  ctx.toast(running ? `Job ${job.id} is asked to stop.` : `Job ${job.id} is cancelled.`, "ok");
  return true;
}

// One action on one job; asks first where it cannot be undone. False when backed out.
export async function act(ctx, name, job) {
  const at = `/v1/jobs/${encodeURIComponent(job.id)}`;
  if (name === "cancel") return cancelJob(ctx, job);
  if (name === "retry") {
    await ctx.api(`/v1/dead/${encodeURIComponent(job.id)}/retry`, {method: "POST"});
    ctx.toast(`Job ${job.id} is queued again.`, "ok");
  } else if (name === "run-now") {
    await ctx.api(`${at}/run-now`, {method: "POST"});
    ctx.toast(`Job ${job.id} is due now: a worker takes it next.`, "ok");
  } else if (name === "delete") {
    if (!(await ctx.confirm({title: "Delete this job?", action: "Delete it", danger: true,
      body: [`${jobName(job)} ${job.id} is deleted for good, with its result or error.`]}))) return false;
    await ctx.api("/v1/jobs/delete-batch", {method: "POST", body: {ids: [job.id]}});
    ctx.toast(`Job ${job.id} is deleted.`, "ok");
  }
  return true;
}

// A row's buttons (extra column of jobTable): `after()` runs once an action is done.
export function rowActions(ctx, message, after) {
  return (job) => {
    const buttons = actionsFor(ctx, job.state).map(([name, label, cls]) => {
      const button = h("button", {type: "button", class: `small ${cls}`, text: label, dataset: {action: name},
        "aria-label": `${label} job ${job.id}`});
      button.addEventListener("click", async () => {
        button.disabled = true;
        message.clear();
        try {
          await act(ctx, name, job);
        } catch (error) {
          message.show(`Could not ${label.toLowerCase()} ${job.id}: ${error.message}`);
        }
        button.disabled = false;
        after();
      });
      return button;
    });
    return buttons.length ? h("span", {class: "row-buttons"}, buttons) : null;
  };
}

// The bar over a list with checkboxes: how many are checked, "all N that match" (the
// filter's every page, walked by cursor), and retry / cancel / delete on them.
// list: pagedList; selected: the Set of checked ids; offered: the actions that mean something
// on that list (a dead letter cannot be cancelled: the dead page offers retry and delete).
export function bulkBar(ctx, {list, selected, message, after, offered}) {
  let everything = false; // "all that match" rather than the checked rows
  const label = h("span", {class: "bulk-count", role: "status"});
  const widen = h("button", {type: "button", class: "link-button", id: "select-matching"});
  const clear = h("button", {type: "button", class: "link-button", text: "Clear selection"});
  const buttons = [
    ["retry", "Retry", "primary", "admin"], ["cancel", "Cancel", "danger", "producer"],
    ["delete", "Delete", "danger", "admin"],
  ].filter(([name, , , scope]) => ctx.can(scope) && (!offered || offered.includes(name))).map(([name, text, cls]) => {
    const button = h("button", {type: "button", class: `small ${cls}`, text, dataset: {bulk: name}});
    button.addEventListener("click", () => run(name, text));
    return button;
  });
  const el = h("div", {class: "bulk", hidden: true, "aria-label": "act on the selected jobs"},
    label, widen, clear, h("span", {class: "bulk-buttons"}, buttons));

  function show() {
    el.hidden = !buttons.length || (!selected.size && !everything);
    label.textContent = everything ? "Every job that matches the filter is selected." :
      `${count(selected.size)} selected.`;
    widen.textContent = everything ? "Only the checked ones" : "Select all that match";
  }

  widen.addEventListener("click", () => {
    everything = !everything;
    show();
  });
  clear.addEventListener("click", () => {
    everything = false;
    selected.clear();
    after();
  });

  // The ids to act on, a batch at a time: the checked ones, or every page of the filter.
  async function* batches() {
    if (!everything) {
      const ids = Array.from(selected);
      for (let i = 0; i < ids.length; i += BATCH) yield ids.slice(i, i + BATCH);
      return;
    }
    for await (const jobs of list.matches(BATCH)) yield jobs.map((job) => job.id);
  }

  async function run(name, text) {
    const what = everything ? "every job that matches the filter (on every page)" : `the ${count(selected.size)} ` +
      "selected job(s)";
    const rule = {retry: "Only dead letters are retried; the others are left as they are.",
      cancel: "Waiting jobs are cancelled, running ones asked to stop; finished ones are left as they are.",
      delete: "Only finished jobs (succeeded, dead, cancelled) are deleted, for good."}[name];
    const reason = h("input", {type: "text", maxlength: 300, name: "reason", autocomplete: "off",
      placeholder: "why (optional): kept in each job's remark"});
    const sure = await ctx.confirm({title: `${text} ${everything ? "all that match" : "the selected jobs"}?`,
      action: `${text} them`, danger: name !== "retry", typed: name === "delete" && everything ? "delete" : null,
      body: [`This acts on ${what}.`, rule, name === "cancel" ? h("label", {}, "Reason", reason) : null]});
    if (!sure) return;
    message.clear();
    let done = 0;
    let left = 0;
    try {
      for await (const ids of batches()) {
        const answer = await send(name, ids, reason.value.trim());
        done += answer.done;
        left += answer.left;
      }
      ctx.toast(`${text}: ${count(done)} job(s)${left ? `; ${count(left)} left as they were` : ""}.`, "ok");
      everything = false;
      selected.clear();
    } catch (error) {
      message.show(`${text} stopped after ${count(done)} job(s): ${error.message}`);
    }
    after();
  }

  async function send(name, ids, reason) {
    if (name === "retry") {
      const answer = await ctx.api("/v1/dead/retry-batch", {method: "POST", body: {ids}});
      return {done: answer.retried, left: answer.not_retried.length};
    }
    if (name === "cancel") {
      const answer = await ctx.api("/v1/jobs/cancel-batch", {method: "POST", body: {ids, reason: reason || null}});
      return {done: answer.cancelled + answer.stopping, left: answer.not_cancelled.length};
    }
    const answer = await ctx.api("/v1/jobs/delete-batch", {method: "POST", body: {ids}});
    return {done: answer.deleted, left: answer.not_deleted.length};
  }

  return {el, show, reset() { everything = false; show(); }};
}
