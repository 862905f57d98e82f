// /dashboard/periodic: periodic schedules as far as the server can know them.

import {badge, code, empty, h, link, note, reconcile, row, section, setAttr, setChildren, setText, table} from "../dom.js";
import {ago, local, short} from "../format.js";
import {pageHead} from "./common.js";

const COLUMNS = [["schedule"], ["cron (UTC)", "nowrap"], ["task"], ["enqueues", "opt wide"], ["next tick"],
  ["then", "opt"], ["last tick"], ["last run"]];

function enqueues(s) {
  if (!s.task) return "—";
  const parts = [];
  if (s.args && s.args.length) parts.push(`args ${JSON.stringify(s.args)}`);
  if (s.kwargs && Object.keys(s.kwargs).length) parts.push(`kwargs ${JSON.stringify(s.kwargs)}`);
  for (const [name, value] of Object.entries(s.options || {})) parts.push(`${name} ${value}`);
  return parts.join(" · ") || "no arguments";
}

export function mount(root, ctx) {
  const head = pageHead("Periodic jobs");
  const t = table(COLUMNS, {id: "periodic"});
  const nothing = empty("No periodic schedule is visible to this server.",
    h("span", {}, "Schedules are defined in your App (", code("@app.periodic(\"*/5 * * * *\")"), ") or in a master's ",
      "config file (", code("[periodic.NAME]"), "). Start the server with ", code("--app module:app"),
      " to list your App's schedules here; a config file's schedules appear once a master enqueued a tick."));
  const idle = h("p", {class: "count-line error-text", id: "no-master", hidden: true},
    "No master is running, so these schedules do not fire: a worker runs jobs but never enqueues ticks. Start one with ",
    code("deferq run --app module:app"), ".");
  root.append(head.el, section(null, idle, t.el, nothing),
    note("Masters (deferq run) enqueue each tick once, however many run: they claim it in the store first. ",
      "The store keeps those claims for 10 minutes, so \"last tick\" is known for that long; the cron of a ",
      "schedule defined only in a master's config file is not visible to the server."));

  async function refresh() {
    const data = await ctx.api("/v1/periodic");
    if (!ctx.alive()) return;
    nothing.hidden = data.schedules.length > 0;
    idle.hidden = !data.schedules.length || data.masters > 0;
    t.el.hidden = !data.schedules.length;
    reconcile(t.body, data.schedules, (s) => s.name, () => row(COLUMNS.length, COLUMNS.map((c) => c[1])), (tr, s) => {
      const cells = tr.children;
      setText(cells[0], s.name);
      setText(cells[1], s.cron || "(in a master's config)");
      setText(cells[2], s.task || "—");
      setText(cells[3], enqueues(s));
      setText(cells[4], s.next.length ? `${short(s.next[0])} (${ago(s.next[0])})` : "—");
      setAttr(cells[4], "title", s.next.length ? local(s.next[0]) : null);
      setText(cells[5], s.next.slice(1).map(short).join(", "));
      setText(cells[6], s.last_tick ? ago(s.last_tick) : "not in the last 10 min");
      setAttr(cells[6], "title", s.last_tick ? local(s.last_tick) : null);
      const last = s.last_job;
      setChildren(cells[7], last ? `${last.id}:${last.state}` : "none", () => last ?
        h("span", {}, badge(last.state), " ", link(`/dashboard/jobs/${encodeURIComponent(last.id)}`, "the job")) : "—");
    });
    head.updated();
  }

  return {refresh};
}
