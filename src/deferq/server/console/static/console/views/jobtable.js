// The job list used by the queue, jobs and dead views: one row per job, kept in place
// across refreshes (rows are matched by job id), so scrolling, checked boxes and an open
// argument survive. Optional: a checkbox per row (selection), and each row's own action.

import {badge, h, link, reconcile, row, setAttr, setChildren, setText, table} from "../dom.js";
import {ago, firstLine, local, shortId} from "../format.js";
import {jobLink, jobName} from "./common.js";

const COLUMNS = [["job"], ["task / topic"], ["arguments", "args"], ["queue", "opt"], ["state"],
  ["attempts", "num opt"], ["when", "nowrap"], ["error / key / tags", "wide"]];
const ARGS_SHOWN = 60; // characters of the arguments a row shows; the whole on hover or click

// The time that matters in a job's state.
function moment(job) {
  if (job.finished_at) return ["finished", job.finished_at];
  if (job.state === "scheduled") return ["due", job.run_at];
  if (job.state === "queued") return ["due", job.run_at];
  return ["created", job.created_at];
}

// The state a row shows: a scheduled job in a durable wait is "waiting", one due again
// after a failed attempt "retrying" (the same words as the Jobs filter).
export function shownState(job) {
  if (job.state !== "scheduled") return job.state;
  if (job.waiting_for) return "waiting";
  return job.attempts > 0 ? "retrying" : "scheduled";
}

// A job's arguments as one line of JSON: positional ones, then name=value.
export function argumentText(job) {
  // encrypted at rest, and this server has not the key: what it is and its size, never a value
  if (job.encrypted && job.encrypted.args !== undefined) return `encrypted (${job.encrypted.args} bytes)`;
  if (job.topic !== null && job.topic !== undefined) return JSON.stringify(job.body ?? null);
  const parts = (job.args || []).map((value) => JSON.stringify(value));
  for (const [name, value] of Object.entries(job.kwargs || {})) parts.push(`${name}=${JSON.stringify(value)}`);
  return parts.join(", ");
}

// A progress bar with its message (hidden while the job reports none); `existing`: one
// made before, found again in the page; `brief`: the percentage only, the message on hover;
// `kept`: also once the job has stopped or ended (a job's page: the last report stays).
export function progressBar(id, existing, brief, kept) {
  const el = existing || h("span", {class: "progress", hidden: true},
    h("progress", {max: 100, value: 0, id: id || null}), h("span", {class: "progress-text"}));
  return {el, show: (job) => showProgress(el, job, brief, kept)};
}

// The arguments cell: truncated, the whole in its title; a click opens it in place.
function argumentCell(td, job) {
  const text = argumentText(job);
  if (td.dataset.full === text) return;
  td.dataset.full = text;
  const long = text.length > ARGS_SHOWN;
  const shown = long ? `${text.slice(0, ARGS_SHOWN - 1)}…` : text;
  const code = h("code", {class: "args-text", text: shown, title: text || null});
  if (long) {
    const open = h("button", {type: "button", class: "link-button", "aria-expanded": "false",
      "aria-label": "show all arguments", text: "more"});
    open.addEventListener("click", () => {
      const wide = open.getAttribute("aria-expanded") === "false";
      code.textContent = wide ? text : shown;
      td.classList.toggle("open", wide);
      open.setAttribute("aria-expanded", String(wide));
      open.textContent = wide ? "less" : "more";
    });
    td.replaceChildren(code, " ", open);
  } else td.replaceChildren(code);
}

// options: `extra(job)`: a node for a last column (a row's action), or null; `select`: a
// Set the checked ids are kept in (a checkbox column with select-all-on-page), and
// `onSelect()` called when it changes.
export function jobTable(options) {
  const {extra, select, onSelect} = options || {};
  const lead = select ? [["", "pick"]] : [];
  const columns = [...lead, ...COLUMNS, ...(extra ? [["", "row-actions"]] : [])];
  const t = table(columns, {class: "jobs"});
  const at = select ? 1 : 0;
  let shown = [];
  const all = select ? h("input", {type: "checkbox", "aria-label": "select every job on this page",
    class: "select-page"}) : null;
  if (all) {
    t.el.querySelector("th").append(all);
    all.addEventListener("change", () => {
      for (const job of shown) {
        if (all.checked) select.add(job.id);
        else select.delete(job.id);
      }
      sync();
      onSelect && onSelect();
    });
  }

  // The boxes (and the page's box) as the selection stands.
  function sync() {
    if (!select) return;
    for (const tr of t.body.children) {
      const box = tr.querySelector("input.pick-job");
      if (box) box.checked = select.has(tr.dataset.key);
    }
    const picked = shown.filter((job) => select.has(job.id)).length;
    all.checked = shown.length > 0 && picked === shown.length;
    all.indeterminate = picked > 0 && picked < shown.length;
  }

  function create() {
    const tr = row(columns.length, columns.map((c) => c[1]));
    if (select) {
      const box = h("input", {type: "checkbox", class: "pick-job"});
      box.addEventListener("change", () => {
        if (box.checked) select.add(tr.dataset.key);
        else select.delete(tr.dataset.key);
        sync();
        onSelect && onSelect();
      });
      tr.children[0].append(box);
    }
    return tr;
  }

  function update(jobs) {
    shown = jobs;
    reconcile(t.body, jobs, (job) => job.id, create, (tr, job) => {
      const cells = Array.from(tr.children).slice(at);
      if (select) setAttr(tr.querySelector("input.pick-job"), "aria-label", `select job ${job.id}`);
      setChildren(cells[0], job.id, () => link(jobLink(job), shortId(job.id), {class: "mono id", title: job.id,
        "aria-label": `job ${job.id}`}));
      setText(cells[1], jobName(job));
      argumentCell(cells[2], job);
      setChildren(cells[3], job.queue, () => link(`/dashboard/queues/${encodeURIComponent(job.queue)}`, job.queue));
      const shown = shownState(job);
      setChildren(cells[4], shown, () => [badge(shown), progressBar().el]);
      setAttr(cells[4].firstChild, "title", shown === job.state ? null : `${job.state}: ${shown}`);
      progressBar(null, cells[4].querySelector(".progress"), true).show(job);
      setText(cells[5], `${job.attempts}/${job.max_attempts}`);
      const [what, when] = moment(job);
      setText(cells[6], when ? `${what} ${ago(when)}` : "—");
      setAttr(cells[6], "title", when ? local(when) : null);
      const tags = (job.tags || []).join(" ");
      const wait = job.waiting_for;
      setChildren(cells[7], `${job.error}\u0000${job.key}\u0000${tags}\u0000${wait && wait.event}`, () => [
        wait ? h("span", {class: "waits", text: `waits for ${wait.event} · ${wait.key}`}) : null,
        job.error ? h("span", {class: "error-text", text: firstLine(job.error)}) :
          job.key && !wait ? h("span", {text: `key ${job.key}`}) : null,
        ...(job.tags || []).map((tag) => h("span", {class: "tag", text: tag}))]);
      if (extra) setChildren(cells[8], `${job.state}`, () => extra(job));
    });
    sync();
  }
  return {el: t.el, update, sync};
}

// Fill a progressBar's element from a job: shown while the job runs and reports progress
// (with `kept`, whatever its state).
function showProgress(el, job, brief, kept) {
  const known = (kept || job.state === "active") && job.progress !== null && job.progress !== undefined;
  el.hidden = !known;
  if (!known) return;
  const percent = Math.round(job.progress * 100);
  const bar = el.querySelector("progress");
  if (bar.value !== percent) bar.value = percent;
  setAttr(bar, "aria-label", `progress ${percent}%`);
  const message = job.progress_message && !brief ? ` · ${job.progress_message}` : "";
  setText(el.querySelector(".progress-text"), `${percent}%${message}`);
  setAttr(el, "title", job.progress_message || null);
}

export function countLine() {
  return h("p", {class: "muted count-line"});
}
