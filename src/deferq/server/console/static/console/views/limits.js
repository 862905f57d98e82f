// /dashboard/limits: the rate and concurrency limits in force (declared in code, set at
// run time, paused), per task, per key and per queue, with what each uses now; an admin
// sets, changes, pauses, resumes and clears them (PUT and DELETE /v1/limits/NAME, POST
// /v1/limits/NAME/resume: a pause ends, the limit set stays).

import {code, empty, h, note, reconcile, row, section, setAttr, setChildren, setText, table} from "../dom.js";
import {compact} from "../format.js";
import {labelled, messageLine, pageHead} from "./common.js";

// On a phone: the limit, what is in force, its use and the buttons (the rest: opt).
const COLUMNS = [["limit"], ["kind", "opt"], ["in force"], ["use now", "nowrap"],
  ["declared in code", "opt wide"], ["set at run time", "opt"], ["", "nowrap row-actions"]];

function limitText(l) {
  if (!l) return "—";
  const parts = [];
  if (l.rate) parts.push(`rate ${l.rate}${l.rate_key ? ` per ${l.rate_key}` : ""}`);
  if (l.concurrency) parts.push(`${l.concurrency} at once${l.concurrency_key ? ` per ${l.concurrency_key}` : ""}`);
  return parts.length ? parts.join(" · ") : "—";
}

function inForce(l) {
  const keys = l.declared || {};
  const text = limitText({rate: l.rate, concurrency: l.concurrency, rate_key: keys.rate_key,
    concurrency_key: keys.concurrency_key});
  return text === "—" && l.paused_for ? "paused only" : text;
}

function useText(l) {
  const parts = [];
  if (l.running !== null) parts.push(`${l.running} of ${l.concurrency} running`);
  if (l.recent_per_s !== null) parts.push(`${l.recent_per_s < 10 ? l.recent_per_s.toFixed(2) : Math.round(l.recent_per_s)}/s`);
  return parts.length ? parts.join(" · ") : "—";
}

export function mount(root, ctx) {
  const admin = ctx.can("admin");
  const adding = h("button", {type: "button", id: "add-limit", text: "Set a limit", hidden: !admin});
  const head = pageHead("Limits", adding);
  const message = messageLine();
  const t = table(COLUMNS, {id: "limits"});
  const nothing = empty("No limit is declared or set.",
    h("span", {}, "Declare one on a task (", code("@app.task(rate=\"100/m\", concurrency=2)"),
      "): it shows here once a worker of your App runs. Or set one at run time here, with ",
      code("deferq limits set"), " or ", code("PUT /v1/limits/NAME"), "."));

  const i = {
    name: h("input", {name: "name", type: "text", required: true, placeholder: "send_sms, customer:7 or queue:emails",
      maxlength: 180, autocomplete: "off"}),
    rate: h("input", {name: "rate", type: "text", placeholder: "50/s", maxlength: 40, autocomplete: "off"}),
    concurrency: h("input", {name: "concurrency", type: "number", min: 1, max: 10000, step: 1, placeholder: "3"}),
    pause: h("input", {name: "pause", type: "number", min: 1, step: "any", placeholder: "60"}),
  };
  const formTitle = h("h2", {text: "Set a limit"});
  const save = h("button", {type: "submit", class: "primary", id: "save-limit", text: "Save"});
  const cancel = h("button", {type: "button", text: "Cancel"});
  const form = h("form", {class: "panel narrow", id: "limit-form", novalidate: true, hidden: true},
    formTitle,
    labelled("name", i.name, "a task's name, a limit key (customer:7), or queue: and a queue's name"),
    h("div", {class: "row"}, labelled("rate", i.rate, "runs per s, m, h or d, like 50/s or 100/m"),
      labelled("at once", i.concurrency, "runs at the same time, across the fleet")),
    h("div", {class: "row"}, labelled("pause for (seconds)", i.pause, "no job under it starts until then")),
    h("p", {class: "hint", text: "A rate or a number at once replaces what was set before, whole; a pause " +
      "alone keeps it. Every worker holds it within a second."}),
    h("div", {class: "actions"}, save, cancel));

  root.append(head.el, message.el, form, section(null, t.el, nothing),
    note("A limit set at run time on a task replaces the declared one (its key template kept); one on a key ",
      "wins over its task's; one on ", code("queue:NAME"), " holds for every job of the queue beside its task's. ",
      "Use now: the slots held of a limit with one scope, and the runs a second over the last one to two ",
      "minutes. The API: ", code("GET /v1/limits"), ", ", code("PUT/DELETE /v1/limits/NAME"), ", ",
      code("POST /v1/limits/NAME/resume"), "."));

  function openForm(l, pausing) {
    form.hidden = false;
    formTitle.textContent = l ? (pausing ? `Pause ${l.name}` : `Change ${l.name}`) : "Set a limit";
    i.name.value = l ? l.name : "";
    i.name.readOnly = Boolean(l);
    const shown = l && !pausing ? (l.set || l.declared || {}) : {};
    i.rate.value = shown.rate || "";
    i.concurrency.value = shown.concurrency || "";
    i.pause.value = pausing ? "60" : "";
    (pausing ? i.pause : l ? i.rate : i.name).focus();
  }

  adding.addEventListener("click", () => openForm(null, false));
  cancel.addEventListener("click", () => { form.hidden = true; });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.clear();
    const name = i.name.value.trim();
    const body = {};
    if (i.rate.value.trim()) body.rate = i.rate.value.trim();
    if (i.concurrency.value.trim()) body.concurrency = Number(i.concurrency.value);
    if (i.pause.value.trim()) body.pause_s = Number(i.pause.value);
    if (!name || !Object.keys(body).length) {
      message.show(`Not saved: ${name ? "give a rate, a number at once or a pause" : "a limit needs a name"}`);
      return;
    }
    save.disabled = true;
    try {
      await ctx.api(`/v1/limits/${encodeURIComponent(name)}`, {method: "PUT", body});
      form.hidden = true;
      ctx.toast(`Limit ${name} saved: every worker holds it within a second.`, "ok");
    } catch (error) {
      message.show(`Not saved: ${error.message}`);
    }
    save.disabled = false;
    refresh();
  });

  async function clear(l) {
    const ok = await ctx.confirm({title: `Clear ${l.name}?`, action: "Clear", danger: true,
      body: [l.declared ? "The limits declared in code hold again." : "It is no longer limited at run time.",
        l.paused_for ? "Its pause ends too." : null]});
    if (!ok) return;
    message.clear();
    try {
      await ctx.api(`/v1/limits/${encodeURIComponent(l.name)}`, {method: "DELETE"});
      ctx.toast(`Limit ${l.name} cleared.`, "ok");
    } catch (error) {
      message.show(`Could not clear ${l.name}: ${error.message}`);
    }
    refresh();
  }

  async function resume(l) {
    message.clear();
    try {
      await ctx.api(`/v1/limits/${encodeURIComponent(l.name)}/resume`, {method: "POST"});
      ctx.toast(`Limit ${l.name} resumed: its jobs start again within a second.`, "ok");
    } catch (error) {
      message.show(`Could not resume ${l.name}: ${error.message}`);
    }
    refresh();
  }

  const latest = new Map(); // name -> the limit as last listed (what the buttons act on)

  async function refresh() {
    const data = await ctx.api("/v1/stats/limits");
    if (!ctx.alive()) return;
    nothing.hidden = data.limits.length > 0;
    t.el.hidden = !data.limits.length;
    reconcile(t.body, data.limits, (l) => l.name, () => row(COLUMNS.length, COLUMNS.map((c) => c[1])), (tr, l) => {
      const cells = tr.children;
      tr.dataset.name = l.name;
      latest.set(l.name, l);
      setText(cells[0], l.name);
      setAttr(cells[0], "title", l.kind === "task" && l.queue ? `on queue ${l.queue}` : null);
      setText(cells[1], l.kind);
      setChildren(cells[2], `${inForce(l)}|${l.paused_for !== null}`, () => [inForce(l), " ",
        l.paused_for !== null ? h("span", {class: "badge paused pause-left"}) : null]);
      const left = cells[2].querySelector(".pause-left");
      if (left) setText(left, `paused ${compact(Math.ceil(l.paused_for))}`);
      setText(cells[3], useText(l));
      setText(cells[4], limitText(l.declared));
      setText(cells[5], limitText(l.set));
      const paused = l.paused_for !== null;
      setChildren(cells[6], `${admin}:${Boolean(l.set || paused)}:${paused}`, () => admin ? h("span", {class: "row-buttons"},
        h("button", {type: "button", class: "small", "data-action": "change", text: "Change",
          onclick: () => openForm(latest.get(l.name), false)}),
        paused ? h("button", {type: "button", class: "small", "data-action": "resume", text: "Resume",
          title: "End the pause now; the limit stays", onclick: () => resume(latest.get(l.name))})
          : h("button", {type: "button", class: "small", "data-action": "pause", text: "Pause",
            onclick: () => openForm(latest.get(l.name), true)}),
        l.set || l.paused_for ? h("button", {type: "button", class: "small danger", "data-action": "clear",
          text: "Clear", onclick: () => clear(latest.get(l.name))}) : null) : "");
    });
    head.updated();
  }

  return {refresh};
}
