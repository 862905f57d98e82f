// /dashboard/periodic: the store's schedules, their next ticks in their own zone, their
// last run and state; an admin adds, edits, pauses and resumes them (PUT /v1/schedules/...).

import {badge, code, empty, h, link, note, reconcile, row, section, setAttr, setChildren, setText, table} from "../dom.js";
import {ago, local} from "../format.js";
import {labelled, messageLine, pageHead} from "./common.js";

const COLUMNS = [["schedule"], ["timing", "nowrap"], ["task"], ["enqueues", "opt wide"], ["state"], ["next ticks (its zone)"],
  ["last tick"], ["last run"], ["", "nowrap"]];

function enqueues(s) {
  const parts = [];
  // encrypted at rest, and this server has not the key: their size, never a value
  if (s.encrypted) parts.push(`arguments encrypted (${s.encrypted.args} bytes)`);
  if (s.args && s.args.length) parts.push(`args ${JSON.stringify(s.args)}`);
  if (s.kwargs && Object.keys(s.kwargs).length) parts.push(`kwargs ${JSON.stringify(s.kwargs)}`);
  for (const [name, value] of Object.entries(s.options || {})) parts.push(`${name} ${value}`);
  if (s.jitter) parts.push(`jitter ${s.jitter}s`);
  parts.push(`missed ${s.missed}`);
  return parts.join(" · ");
}

function jsonOf(text, kind, what) {
  if (!text.trim()) return kind === "list" ? [] : {};
  const value = JSON.parse(text); // a SyntaxError names the problem
  if (kind === "list" ? !Array.isArray(value) : (typeof value !== "object" || value === null || Array.isArray(value))) {
    throw new Error(`${what} must be a JSON ${kind}`);
  }
  return value;
}

export function mount(root, ctx) {
  const admin = ctx.can("admin");
  const adding = h("button", {type: "button", id: "add-schedule", text: "Add a schedule", hidden: !admin});
  const head = pageHead("Periodic jobs", adding);
  const message = messageLine();
  const t = table(COLUMNS, {id: "periodic"});
  const nothing = empty("No schedule is in the store yet.",
    h("span", {}, "Declare one in your App (", code("@app.periodic(\"*/5 * * * *\", tz=\"Europe/Berlin\")"),
      "): every process of the App writes its schedules at start. Or add one here, with ",
      code("deferq schedule add"), " or ", code("PUT /v1/schedules/NAME"), "."));
  const firing = h("p", {class: "count-line", id: "schedule-leader"});
  const broken = h("ul", {class: "error-text", id: "broken-schedules", hidden: true});

  const i = {
    name: h("input", {name: "name", type: "text", required: true, placeholder: "nightly-report", maxlength: 200}),
    task: h("input", {name: "task", type: "text", required: true, placeholder: "send_report"}),
    kind: h("select", {name: "kind", "aria-label": "timing"},
      [["cron", "cron"], ["every", "every N seconds"]].map(([v, t]) => h("option", {value: v, text: t}))),
    cron: h("input", {name: "cron", type: "text", placeholder: "0 9 * * 1-5"}),
    tz: h("input", {name: "tz", type: "text", placeholder: "UTC", list: "zones"}),
    every: h("input", {name: "every", type: "number", min: 1, step: "any", placeholder: "30"}),
    args: h("input", {name: "args", type: "text", placeholder: "[1, \"two\"]", "data-example": "[1, \"two\"]"}),
    kwargs: h("input", {name: "kwargs", type: "text", placeholder: "{\"days\": 30}", "data-example": "{\"days\": 30}"}),
    queue: h("input", {name: "queue", type: "text", placeholder: "the task's"}),
    jitter: h("input", {name: "jitter", type: "number", min: 0, step: "any", placeholder: "0"}),
    missed: h("select", {name: "missed"}, ["skip", "latest", "all"].map((m) => h("option", {value: m, text: m}))),
  };
  const zones = h("datalist", {id: "zones"}, (Intl.supportedValuesOf ? Intl.supportedValuesOf("timeZone") : [])
    .map((z) => h("option", {value: z})));
  const cronFields = h("div", {class: "row"}, labelled("cron", i.cron, "five fields, or six with seconds first"),
    labelled("time zone", i.tz, "an IANA name; daylight saving: docs/schedules.md"));
  // what the expression means, as it is typed: its next ticks on its zone's clock, or why it is refused
  const meaning = h("p", {class: "count-line", id: "cron-meaning", "aria-live": "polite"});
  let asked = 0;
  async function explain() {
    const cron = i.cron.value.trim();
    const mine = ++asked;
    if (!cron) { setText(meaning, ""); return; }
    const body = {cron};
    if (i.tz.value.trim()) body.tz = i.tz.value.trim();
    let said, failed = false;
    try {
      said = (await ctx.api("/v1/periodic/preview", {method: "POST", body})).described;
    } catch (error) {
      said = error.message;
      failed = true;
    }
    if (mine !== asked || !ctx.alive()) return; // a newer keystroke asked again
    meaning.className = `count-line${failed ? " error-text" : ""}`;
    setText(meaning, said);
  }
  let typing = null;
  for (const input of [i.cron, i.tz]) {
    input.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(explain, 250); });
  }
  const everyFields = h("div", {class: "row", hidden: true}, labelled("every (seconds)", i.every, "at least 1"));
  i.kind.addEventListener("change", () => {
    cronFields.hidden = meaning.hidden = i.kind.value !== "cron";
    everyFields.hidden = i.kind.value !== "every";
  });
  const formTitle = h("h2", {text: "Add a schedule"});
  const save = h("button", {type: "submit", class: "primary", id: "save-schedule", text: "Save"});
  const cancel = h("button", {type: "button", text: "Cancel"});
  const form = h("form", {class: "schedule-form", id: "schedule-form", novalidate: true, hidden: true},
    formTitle, labelled("name", i.name), labelled("task", i.task, "a task of your App"),
    h("div", {class: "row"}, labelled("timing", i.kind)), cronFields, meaning, everyFields, zones,
    h("div", {class: "row"}, labelled("args (JSON list)", i.args), labelled("kwargs (JSON object)", i.kwargs)),
    h("div", {class: "row"}, labelled("queue", i.queue), labelled("jitter (s)", i.jitter),
      labelled("missed runs", i.missed, "after downtime: none, the newest, or all")),
    h("div", {class: "actions"}, save, cancel));

  root.append(head.el, message.el, section(null, firing, broken, t.el, nothing), form,
    note("Any worker, deferq run or deferq serve fires the schedules: one process at a time holds a lease in ",
      "the store and fires every schedule, each tick exactly once. A schedule from code or from a master's ",
      "config file is written again when its processes start: edit it there for good. The API: ",
      code("GET/PUT/DELETE /v1/schedules/NAME"), "."));

  let sealed = false; // the schedule edited has arguments this server cannot open
  function openForm(s) {
    form.hidden = false;
    sealed = Boolean(s && s.encrypted);
    formTitle.textContent = s ? `Edit ${s.name}` : "Add a schedule";
    i.name.value = s ? s.name : "";
    i.name.readOnly = Boolean(s);
    i.task.value = s ? s.task : "";
    i.kind.value = s && s.every ? "every" : "cron";
    i.kind.dispatchEvent(new Event("change"));
    i.cron.value = s && s.cron ? s.cron : "";
    i.tz.value = s && s.tz ? s.tz : "";
    explain();
    i.every.value = s && s.every ? s.every : "";
    i.args.value = s && s.args && s.args.length ? JSON.stringify(s.args) : "";
    i.kwargs.value = s && s.kwargs && Object.keys(s.kwargs).length ? JSON.stringify(s.kwargs) : "";
    for (const input of [i.args, i.kwargs]) {
      input.disabled = sealed;
      input.placeholder = sealed ? "encrypted: this server has not the key" : input.dataset.example;
    }
    i.queue.value = s && s.options && s.options.queue ? s.options.queue : "";
    i.jitter.value = s && s.jitter ? s.jitter : "";
    i.missed.value = s ? s.missed : "skip";
    (s ? i.task : i.name).focus();
  }

  adding.addEventListener("click", () => openForm(null));
  cancel.addEventListener("click", () => { form.hidden = true; });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.clear();
    const name = i.name.value.trim();
    let body;
    try {
      if (!name) throw new Error("a schedule needs a name");
      if (sealed) throw new Error("its arguments are encrypted and this server has not the key: edit it where the key is");
      body = {task: i.task.value.trim(), args: jsonOf(i.args.value, "list", "args"),
        kwargs: jsonOf(i.kwargs.value, "object", "kwargs"), missed: i.missed.value};
      if (i.kind.value === "cron") {
        body.cron = i.cron.value.trim();
        if (i.tz.value.trim()) body.tz = i.tz.value.trim();
      } else {
        body.every = Number(i.every.value);
      }
      if (i.queue.value.trim()) body.queue = i.queue.value.trim();
      if (i.jitter.value.trim()) body.jitter = Number(i.jitter.value);
    } catch (error) {
      message.show(`Not saved: ${error.message}`);
      return;
    }
    save.disabled = true;
    try {
      await ctx.api(`/v1/schedules/${encodeURIComponent(name)}`, {method: "PUT", body});
      form.hidden = true;
      ctx.toast(`Schedule ${name} saved: it fires without a restart.`, "ok");
    } catch (error) {
      message.show(`Not saved: ${error.message}`);
    }
    save.disabled = false;
    refresh();
  });

  async function setPaused(s, pause) {
    message.clear();
    try {
      await ctx.api(`/v1/schedules/${encodeURIComponent(s.name)}/${pause ? "pause" : "resume"}`, {method: "POST"});
      ctx.toast(pause ? `Schedule ${s.name} is paused.` : `Schedule ${s.name} fires again.`, "ok");
    } catch (error) {
      message.show(`Could not ${pause ? "pause" : "resume"} ${s.name}: ${error.message}`);
    }
    refresh();
  }

  const latest = new Map(); // name -> the schedule as last listed (what Edit opens)

  async function refresh() {
    const data = await ctx.api("/v1/periodic");
    if (!ctx.alive()) return;
    const bad = data.broken || [];
    nothing.hidden = data.schedules.length > 0 || bad.length > 0;
    t.el.hidden = !data.schedules.length;
    broken.hidden = !bad.length;
    setChildren(broken, JSON.stringify(bad), () => bad.map((b) => h("li", {"data-name": b.name},
      `${b.name}: not fired. ${b.problem}`)));
    firing.className = `count-line${data.leader || !data.schedules.length ? "" : " error-text"}`;
    setText(firing, data.leader ? `Fired by ${data.leader}.` : "No process fires schedules now: start a worker " +
      "(deferq worker), deferq run or deferq serve; each of them takes part.");
    reconcile(t.body, data.schedules, (s) => s.name, () => row(COLUMNS.length, COLUMNS.map((c) => c[1])), (tr, s) => {
      const cells = tr.children;
      tr.dataset.name = s.name;
      setText(cells[0], `${s.name} (${s.source})`);
      setAttr(cells[0], "title", {code: "declared in code: edit it there for good", config: "from a master's config file",
        api: "added at run time"}[s.source] || null);
      setText(cells[1], s.timing);
      setText(cells[2], s.task);
      setText(cells[3], enqueues(s));
      setChildren(cells[4], s.paused ? "paused" : "active", () => badge(s.paused ? "paused" : "active"));
      const next = s.next.slice(0, 3).map((n) => local(n, s.tz || "UTC"));  // a time has its own comma: one a line
      setChildren(cells[5], next.join("|") || "—", () => next.length ? next.map((t) => h("div", {}, t)) : "—");
      setAttr(cells[5], "title", s.next.length ? `${local(s.next[0])} here (${ago(s.next[0])})` : null);
      setText(cells[6], s.last_tick ? `${local(s.last_tick, s.tz || "UTC")} (${ago(s.last_tick)})` : "never");
      const last = s.last_job;
      setChildren(cells[7], last ? `${last.id}:${last.state}` : "none", () => last ?
        h("span", {}, badge(last.state), " ", link(`/dashboard/jobs/${encodeURIComponent(last.id)}`, "the job")) : "—");
      latest.set(s.name, s);
      setChildren(cells[8], `${admin}:${s.paused}`, () => admin ? h("span", {},
        h("button", {type: "button", class: "small", "data-action": "edit", text: "Edit",
          onclick: () => openForm(latest.get(s.name))}),
        " ",
        h("button", {type: "button", class: "small", "data-action": s.paused ? "resume" : "pause",
          text: s.paused ? "Resume" : "Pause", onclick: () => setPaused(s, !s.paused)})) : "");
    });
    head.updated();
  }

  return {refresh};
}
