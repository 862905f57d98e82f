// /dashboard/topics/new and /dashboard/topics/{name}: make or edit a topic. The retry
// condition can be tried on a sample answer, and the backoff shows when the next attempts
// would go, both answered by the server (the same code the delivery workers run).

import {code, copyButton, debounce, empty, h, note, section, setText} from "../dom.js";
import {ago, duration, local} from "../format.js";
import {adminOnly, labelled, messageLine} from "./common.js";

const BACKOFF_FIELDS = {
  fixed: [["seconds", "seconds", 10]],
  linear: [["first", "first", 1], ["step", "step", 2], ["unit", "unit (s)", 60], ["cap", "cap (s)", ""]],
  exponential: [["base", "base", 2], ["first", "first (s)", 1], ["cap", "cap (s)", 600]],
  schedule: [["seconds", "waits (s), comma-separated", "60, 180, 300, 420"]],
};
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$/;
const SAMPLE = '{"code": 200, "data": {"status": 2, "msg": "ok"}}';

function newSecret() {
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  return "whsec_" + btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function numberInput(name, placeholder, attrs) {
  return h("input", {name, type: "number", step: "any", min: 0, placeholder: String(placeholder), ...(attrs || {})});
}

export function mount(root, ctx) {
  if (!ctx.can("admin")) return adminOnly(root, ctx, "Topics", "A topic holds the secret its callbacks are signed with.");
  const creating = ctx.params[0] === "new";
  let name = creating ? "" : ctx.params[0];
  let loaded = null; // the topic as last read from the server
  let dirty = false;
  let secret = null; // a rotated secret, sent with the next save

  const message = messageLine();
  const changed = h("div", {class: "message warn", hidden: true});
  const heading = h("h1", {text: creating ? "New topic" : `Topic ${name}`});
  const i = {
    name: h("input", {name: "name", type: "text", required: true, placeholder: "order-paid", autocomplete: "off",
      pattern: NAME.source, maxlength: 100}),
    url: h("input", {name: "url", type: "url", required: true, placeholder: "https://shop.example/hooks/paid"}),
    method: h("select", {name: "method"}, ["POST", "PUT", "PATCH"].map((m) => h("option", {value: m, text: m}))),
    queue: h("input", {name: "queue", type: "text", placeholder: "callbacks"}),
    priority: h("select", {name: "priority"}, ["normal", "high", "low"].map((p) => h("option", {value: p, text: p}))),
    delay_ms: numberInput("delay_ms", 0, {step: 1}),
    ttr: numberInput("ttr", 30),
    max_attempts: numberInput("max_attempts", 10, {step: 1, min: 1, max: 1000}),
    max_answer_bytes: numberInput("max_answer_bytes", 1048576, {step: 1, min: 1}),
    retry_condition: h("textarea", {name: "retry_condition", rows: 2, spellcheck: "false", maxlength: 2000,
      placeholder: "{res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'"}),
    kind: h("select", {name: "backoff_kind", "aria-label": "backoff kind"},
      Object.keys(BACKOFF_FIELDS).map((k) => h("option", {value: k, text: k}))),
    jitter: h("input", {name: "jitter", type: "checkbox", checked: true}),
  };
  i.kind.value = "linear";
  const backoffInputs = h("div", {class: "row"});
  const backoffBoxes = {};
  const jitterLabel = h("label", {class: "check"}, i.jitter, " jitter (each wait between half and all of it)");
  const preview = h("ol", {class: "preview", id: "backoff-preview"});
  const headers = h("div", {class: "headers", id: "headers"});
  const secretShown = h("code", {class: "secret", text: "••••••••••••"});
  let revealed = false;
  const reveal = h("button", {type: "button", class: "small", text: "Reveal"});
  const rotate = h("button", {type: "button", class: "small", id: "rotate-secret", text: "Rotate…"});
  const secretNote = h("p", {class: "hint"});
  const tryStatus = h("input", {type: "number", min: 100, max: 599, value: 200, "aria-label": "status",
    class: "status"});
  const tryAnswer = h("textarea", {rows: 3, spellcheck: "false", "aria-label": "sample answer", id: "try-answer"});
  tryAnswer.value = SAMPLE;
  const verdict = h("p", {class: "verdict", id: "try-verdict", role: "status"});
  const save = h("button", {type: "submit", class: "primary", id: "save-topic", text: creating ? "Make the topic" :
    "Save"});
  const remove = h("button", {type: "button", class: "danger", id: "delete-topic", text: "Delete…", hidden: creating});
  const form = h("form", {class: "topic-form", id: "topic-form", novalidate: true},
    section("Where callbacks go",
      creating ? labelled("name", i.name, "1-100 of A-Z a-z 0-9 _ . : -") : null,
      labelled("callback URL", i.url, "http(s); the workers' network policy decides which addresses they may call"),
      h("div", {class: "row"}, labelled("method", i.method), labelled("queue", i.queue, "workers must consume it"),
        labelled("priority", i.priority)),
      h("div", {class: "row"}, labelled("delay (ms)", i.delay_ms, "default delay of its jobs"),
        labelled("ttr (s)", i.ttr, "time to wait for an answer"),
        labelled("max attempts", i.max_attempts), labelled("max answer bytes", i.max_answer_bytes)),
      h("div", {class: "field"}, h("span", {class: "field-label", text: "extra headers"}), headers,
        h("button", {type: "button", class: "small", text: "Add a header", onclick: () => addHeader("", "")}))),
    section("When to retry",
      labelled("retry condition", i.retry_condition,
        "Empty: retry only on errors, timeouts, non-2xx and empty answers. {res.path} reads the JSON answer."),
      h("div", {class: "try"}, h("h3", {text: "Try it on a sample answer"}),
        h("div", {class: "row"}, labelled("status", tryStatus), labelled("answer body", tryAnswer)), verdict),
      h("div", {class: "row"}, labelled("backoff", i.kind), backoffInputs, jitterLabel),
      h("h3", {text: "Next attempts if every one fails"}), preview),
    creating ? null : section("Signing secret",
      h("div", {class: "secret-row"}, secretShown, reveal, copyButton(() => secret || (loaded && loaded.signing_secret)),
        rotate), secretNote),
    h("div", {class: "actions"}, save, h("a", {href: "/dashboard/topics", class: "button-like", text: "Back"}),
      remove));
  const sendBody = h("textarea", {rows: 3, spellcheck: "false", "aria-label": "job body", id: "send-body"});
  sendBody.value = '{"hello": "from the console"}';
  const sendPanel = creating || !ctx.can("producer") ? null : section("Send a job to this topic now",
    labelled("body (JSON)", sendBody),
    h("button", {type: "button", id: "send-job", text: "Send", onclick: sendJob}),
    note("Stored as a job of this topic, due now: POST /v1/jobs with ", code('{"topic": …, "body": …}'), "."));
  root.append(h("div", {class: "narrow"}, h("div", {class: "page-head"}, heading), changed, message.el, form,
    sendPanel));

  // -- the form -------------------------------------------------------------------------

  function addHeader(key, value) {
    const k = h("input", {type: "text", placeholder: "X-Team", value: key, "aria-label": "header name"});
    const v = h("input", {type: "text", placeholder: "billing", value, "aria-label": "header value"});
    const line = h("div", {class: "header-row"}, k, v,
      h("button", {type: "button", class: "small", text: "Remove", onclick: () => { line.remove(); touched(); }}));
    headers.append(line);
  }

  function showBackoffFields(values) {
    backoffInputs.replaceChildren();
    for (const key of Object.keys(backoffBoxes)) delete backoffBoxes[key];
    for (const [key, label, placeholder] of BACKOFF_FIELDS[i.kind.value]) {
      const box = i.kind.value === "schedule" ?
        h("input", {type: "text", placeholder, "aria-label": label}) : numberInput(key, placeholder);
      const value = values && values[key];
      if (value !== undefined && value !== null) box.value = Array.isArray(value) ? value.join(", ") : value;
      backoffBoxes[key] = box;
      backoffInputs.append(labelled(label, box));
    }
    jitterLabel.hidden = i.kind.value !== "exponential";
    if (values && typeof values.jitter === "boolean") i.jitter.checked = values.jitter;
  }

  function backoff() {
    const spec = {kind: i.kind.value};
    for (const [key, box] of Object.entries(backoffBoxes)) {
      const text = box.value.trim();
      if (!text) continue;
      spec[key] = i.kind.value === "schedule" ? text.split(/[\s,]+/).filter(Boolean).map(Number) : Number(text);
    }
    if (i.kind.value === "exponential") spec.jitter = i.jitter.checked;
    return spec;
  }

  function fill(topic) {
    i.url.value = topic.url;
    i.method.value = topic.method;
    i.queue.value = topic.queue;
    i.priority.value = topic.priority;
    i.delay_ms.value = topic.delay_ms;
    i.ttr.value = topic.ttr;
    i.max_attempts.value = topic.max_attempts;
    i.max_answer_bytes.value = topic.max_answer_bytes;
    i.retry_condition.value = topic.retry_condition || "";
    headers.replaceChildren();
    for (const [key, value] of Object.entries(topic.headers || {})) addHeader(key, value);
    i.kind.value = topic.backoff.kind;
    showBackoffFields(topic.backoff);
    secret = null;
    showSecret();
    dirty = false;
    changed.hidden = true;
    tryCondition();
    previewBackoff();
  }

  function body() {
    const data = {url: i.url.value.trim(), method: i.method.value, priority: i.priority.value, backoff: backoff(),
      retry_condition: i.retry_condition.value.trim() || null, headers: {}};
    if (i.queue.value.trim()) data.queue = i.queue.value.trim();
    for (const key of ["delay_ms", "ttr", "max_attempts", "max_answer_bytes"]) {
      if (i[key].value.trim() !== "") data[key] = Number(i[key].value);
    }
    for (const line of headers.children) {
      const [k, v] = line.querySelectorAll("input");
      if (k.value.trim()) data.headers[k.value.trim()] = v.value;
    }
    if (secret) data.signing_secret = secret;
    return data;
  }

  function showSecret() {
    const value = secret || (loaded && loaded.signing_secret) || "";
    setText(secretShown, revealed ? value : "••••••••••••");
    setText(reveal, revealed ? "Hide" : "Reveal");
    setText(secretNote, secret ? "A new secret: it takes effect when you save. Receivers that verify " +
      "signatures must accept it from then on." : "Receivers verify X-Deferq-Signature with it: HMAC-SHA256 of " +
      "timestamp + \".\" + body.");
  }

  function touched() {
    dirty = true;
    message.clear();
  }

  // -- trying settings on the server ------------------------------------------------------

  const tryCondition = debounce(async () => {
    try {
      const answer = await ctx.api("/v1/conditions/evaluate", {method: "POST", body: {
        condition: i.retry_condition.value.trim() || null, answer: tryAnswer.value,
        status: Number(tryStatus.value) || 200}});
      verdict.className = `verdict ${answer.retry ? "retry" : "ok"}`;
      setText(verdict, answer.retry ? `Retried: ${answer.reason}.` : "Delivered: this answer ends the job (no retry).");
    } catch (error) {
      verdict.className = "verdict invalid";
      setText(verdict, error.message);
    }
  }, 250);

  const previewBackoff = debounce(async () => {
    const attempts = Math.min(Number(i.max_attempts.value) || 10, 1000);
    try {
      const answer = await ctx.api("/v1/backoff/preview", {method: "POST", body: {backoff: backoff(), attempts}});
      const now = Date.now() / 1000;
      const shown = answer.retries.slice(0, 12).map((r) => h("li", {},
        h("span", {text: `attempt ${r.attempt}: `}),
        h("strong", {text: r.wait_min < r.wait ? `${duration(r.wait_min)}–${duration(r.wait)}` : duration(r.wait)}),
        h("span", {class: "muted", text: ` after the one before; ${duration(r.after)} after the first ` +
          `(${local(now + r.after)}, ${ago(now + r.after)})`})));
      if (answer.retries.length > 12) shown.push(h("li", {class: "muted", text: `… ${answer.retries.length - 12} more`}));
      if (!answer.retries.length) shown.push(h("li", {class: "muted", text: "one attempt only: no retry"}));
      preview.replaceChildren(...shown);
      preview.classList.remove("invalid");
    } catch (error) {
      preview.replaceChildren(h("li", {text: error.message}));
      preview.classList.add("invalid");
    }
  }, 250);

  // -- actions ------------------------------------------------------------------------------

  form.addEventListener("input", (event) => {
    if (event.target === tryAnswer || event.target === tryStatus) return;
    touched();
  });
  form.addEventListener("change", touched);
  for (const control of [i.retry_condition, tryAnswer, tryStatus]) control.addEventListener("input", tryCondition);
  for (const control of [i.max_attempts, backoffInputs, i.jitter]) control.addEventListener("input", previewBackoff);
  i.jitter.addEventListener("change", previewBackoff);
  i.kind.addEventListener("change", () => {
    showBackoffFields(null);
    previewBackoff();
  });
  reveal.addEventListener("click", () => {
    revealed = !revealed;
    showSecret();
  });
  rotate.addEventListener("click", async () => {
    const sure = await ctx.confirm({title: "Rotate the signing secret?", action: "Make a new secret", body: [
      "A new secret is made now and used from the moment you save. Until your receivers know it, they will " +
      "refuse the signatures (and deliveries will be retried)."]});
    if (!sure) return;
    secret = newSecret();
    revealed = true;
    touched();
    showSecret();
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.clear();
    if (creating) {
      name = i.name.value.trim();
      if (!NAME.test(name)) {
        message.show("The name must be 1-100 of A-Z a-z 0-9 _ . : - (starting with a letter or digit).");
        return;
      }
    }
    save.disabled = true;
    try {
      const topic = await ctx.api(`/v1/topics/${encodeURIComponent(name)}`, {method: "PUT", body: body()});
      ctx.toast(`Topic ${topic.name} saved.`, "ok");
      if (creating) {
        ctx.navigate(`/dashboard/topics/${encodeURIComponent(topic.name)}`, {replace: true});
        return;
      }
      loaded = topic;
      fill(topic);
    } catch (error) {
      message.show(`Not saved: ${error.message}`);
    } finally {
      save.disabled = false;
    }
  });

  remove.addEventListener("click", async () => {
    const sure = await ctx.confirm({title: `Delete topic ${name}?`, action: "Delete", danger: true, typed: name,
      body: ["Jobs of this topic that still wait will go dead at their next attempt (with an alert)."]});
    if (!sure) return;
    try {
      await ctx.api(`/v1/topics/${encodeURIComponent(name)}`, {method: "DELETE"});
      ctx.toast(`Topic ${name} deleted.`, "ok");
      ctx.navigate("/dashboard/topics", {replace: true});
    } catch (error) {
      message.show(`Not deleted: ${error.message}`);
    }
  });

  async function sendJob() {
    let payload;
    try {
      payload = JSON.parse(sendBody.value);
    } catch (error) {
      message.show(`The body is not JSON: ${error.message}`);
      return;
    }
    try {
      const receipt = await ctx.api("/v1/jobs", {method: "POST", body: {topic: name, body: payload}});
      ctx.toast(`Job ${receipt.id} stored (${receipt.state}).`, "ok");
      message.show(h("span", {}, "Sent: ", h("a", {href: `/dashboard/jobs/${receipt.id}`, text: receipt.id})), "ok");
    } catch (error) {
      message.show(`Not sent: ${error.message}`);
    }
  }

  // -- loading and following changes ----------------------------------------------------------

  async function refresh() {
    if (creating) return;
    let topic;
    try {
      topic = await ctx.api(`/v1/topics/${encodeURIComponent(name)}`);
    } catch (error) {
      if (error.status === 404 && ctx.alive()) {
        form.replaceWith(empty(`No topic ${name}.`, "It may have been deleted. ",
          h("a", {href: "/dashboard/topics/new", text: "Make a new topic"})));
        if (sendPanel) sendPanel.remove();
      }
      throw error;
    }
    if (!ctx.alive()) return;
    if (!loaded) {
      loaded = topic;
      fill(topic);
      return;
    }
    if (topic.updated_at !== loaded.updated_at) {
      if (!dirty) {
        loaded = topic;
        fill(topic);
        ctx.toast(`Topic ${name} was changed elsewhere: showing the new settings.`);
      } else {
        changed.replaceChildren(`This topic was changed elsewhere at ${local(topic.updated_at)} while you edit it. `,
          h("button", {type: "button", class: "small", text: "Show their version", onclick: () => {
            loaded = topic;
            fill(topic);
          }}), " or save yours to replace it.");
        changed.hidden = false;
      }
    }
  }

  if (creating) {
    showBackoffFields({kind: "linear"});
    tryCondition();
    previewBackoff();
    i.name.focus();
  }
  return {refresh};
}
