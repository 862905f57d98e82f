// The job list used by the queue, jobs and dead views: one row per job, kept in place
// across refreshes (rows are matched by job id), so scrolling and selection survive.

import {badge, h, link, reconcile, row, setAttr, setChildren, setText, table} from "../dom.js";
import {ago, firstLine, local} from "../format.js";
import {jobLink, jobName} from "./common.js";

const COLUMNS = [["job"], ["task / topic"], ["queue", "opt"], ["state"], ["attempts", "num opt"], ["when", "nowrap"],
  ["error / key, tags", "wide"]];

// The time that matters in a job's state.
function moment(job) {
  if (job.finished_at) return ["finished", job.finished_at];
  if (job.state === "scheduled") return ["due", job.run_at];
  if (job.state === "queued") return ["due", job.run_at];
  return ["created", job.created_at];
}

// extra(job) -> a node for a last column (e.g. a Retry button), or null.
export function jobTable(options) {
  const {extra} = options || {};
  const columns = extra ? [...COLUMNS, [""]] : COLUMNS;
  const t = table(columns, {class: "jobs"});
  function update(jobs) {
    reconcile(t.body, jobs, (job) => job.id, () => row(columns.length, columns.map((c) => c[1])), (tr, job) => {
      const cells = tr.children;
      setChildren(cells[0], job.id, () => link(jobLink(job), job.id, {class: "mono id"}));
      setText(cells[1], jobName(job));
      setChildren(cells[2], job.queue, () => link(`/dashboard/queues/${encodeURIComponent(job.queue)}`, job.queue));
      setChildren(cells[3], job.state, () => badge(job.state));
      setText(cells[4], `${job.attempts}/${job.max_attempts}`);
      const [what, at] = moment(job);
      setText(cells[5], at ? `${what} ${ago(at)}` : "—");
      setAttr(cells[5], "title", at ? local(at) : null);
      const labels = [job.key ? `key ${job.key}` : "", job.tags && job.tags.length ? `tags ${job.tags.join(", ")}` : ""];
      setText(cells[6], job.error ? firstLine(job.error) : labels.filter(Boolean).join(" · "));
      cells[6].classList.toggle("error-text", Boolean(job.error));
      if (extra) setChildren(cells[7], `${job.state}`, () => extra(job));
    });
  }
  return {el: t.el, update};
}

export function countLine() {
  return h("p", {class: "muted count-line"});
}
