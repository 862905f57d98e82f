// /dashboard/alerts: where alerts go (e-mail, webhook), how often, on what; a test alert.

import {code, h, note, section, setText} from "../dom.js";
import {adminOnly, labelled, messageLine, pageHead} from "./common.js";

export function mount(root, ctx) {
  if (!ctx.can("admin")) return adminOnly(root, ctx, "Alert settings", "They may hold an SMTP password.");
  const head = pageHead("Alerts");
  const message = messageLine();
  const changed = h("div", {class: "message warn", hidden: true});
  const i = {
    email: h("input", {type: "checkbox", name: "email_on"}),
    smtp: h("input", {type: "text", name: "smtp", placeholder: "smtp.example.com:25"}),
    from: h("input", {type: "email", name: "from", placeholder: "deferq@example.com"}),
    to: h("input", {type: "text", name: "to", placeholder: "ops@example.com, oncall@example.com"}),
    username: h("input", {type: "text", name: "username", autocomplete: "off"}),
    password: h("input", {type: "password", name: "password", autocomplete: "new-password"}),
    starttls: h("input", {type: "checkbox", name: "starttls"}),
    webhook: h("input", {type: "url", name: "webhook", placeholder: "https://chat.example/hooks/deferq"}),
    min_interval: h("input", {type: "number", name: "min_interval", min: 0, step: "any", placeholder: "300"}),
    oldest_waiting: h("input", {type: "number", name: "oldest_waiting", min: 0, step: "any", placeholder: "off"}),
    dead_letters: h("input", {type: "checkbox", name: "dead_letters", checked: true}),
  };
  const emailFields = h("div", {class: "sub-fields"},
    h("div", {class: "row"}, labelled("SMTP server", i.smtp, "host:port"), labelled("from", i.from)),
    labelled("to", i.to, "comma-separated"),
    h("div", {class: "row"}, labelled("user", i.username), labelled("password", i.password),
      h("label", {class: "check"}, i.starttls, " STARTTLS")));
  const backlog = h("div", {class: "headers", id: "backlog"});
  const save = h("button", {type: "submit", class: "primary", id: "save-alerts", text: "Save"});
  const test = h("button", {type: "button", id: "test-alert", text: "Send a test alert"});
  const results = h("ul", {class: "results", id: "test-results"});
  const form = h("form", {id: "alerts-form", novalidate: true},
    section("Targets",
      h("label", {class: "check"}, i.email, " Send e-mail"), emailFields,
      labelled("webhook URL", i.webhook, "gets a JSON POST for each alert; empty: none")),
    section("Thresholds",
      h("div", {class: "row"},
        labelled("at most one alert per kind and subject every (s)", i.min_interval),
        labelled("alert when a due job waited longer than (s)", i.oldest_waiting, "empty: off")),
      h("label", {class: "check"}, i.dead_letters, " alert when jobs go dead"),
      h("div", {class: "field"}, h("span", {class: "field-label", text: "backlog per queue: alert above"}), backlog,
        h("button", {type: "button", class: "small", text: "Add a queue", onclick: () => addBacklog("", "")}))),
    h("div", {class: "actions"}, save, test), results);
  root.append(h("div", {class: "narrow"}, head.el, changed, message.el, form),
    note("Who reads these settings: the workers that deliver callbacks, for dead deliveries (re-read every ",
      "10 s), and every supervisor (", code("deferq run"), "), which alerts on a store that is down, backlogs, ",
      "long waits, dead letters and crashes: what is saved here wins over its config file's [alerts] table, key ",
      "by key, from its next check on. ", code("GET/PUT /v1/settings/alerts"), ", ",
      code("POST /v1/settings/alerts/test"), "."));
  let loaded;
  let dirty = false;

  function addBacklog(queue, limit) {
    const q = h("input", {type: "text", value: queue, placeholder: "email", "aria-label": "queue"});
    const n = h("input", {type: "number", value: limit, min: 0, step: 1, placeholder: "1000", "aria-label": "jobs"});
    const line = h("div", {class: "header-row"}, q, n,
      h("button", {type: "button", class: "small", text: "Remove", onclick: () => { line.remove(); dirty = true; }}));
    backlog.append(line);
  }

  function fill(settings) {
    const s = settings || {};
    const email = s.email || null;
    i.email.checked = Boolean(email);
    i.smtp.value = email ? email.smtp || "" : "";
    i.from.value = email ? email.from || "" : "";
    i.to.value = email ? [email.to].flat().join(", ") : "";
    i.username.value = email ? email.username || "" : "";
    i.password.value = email ? email.password || "" : "";
    i.starttls.checked = Boolean(email && email.starttls);
    i.webhook.value = s.webhook || "";
    i.min_interval.value = s.min_interval ?? "";
    i.oldest_waiting.value = s.oldest_waiting ?? "";
    i.dead_letters.checked = s.dead_letters !== false;
    backlog.replaceChildren();
    for (const [queue, limit] of Object.entries(s.backlog || {})) addBacklog(queue, limit);
    emailFields.hidden = !i.email.checked;
    dirty = false;
    changed.hidden = true;
  }

  function settings() {
    const data = {};
    if (i.email.checked) {
      data.email = {smtp: i.smtp.value.trim(), from: i.from.value.trim(),
        to: i.to.value.split(",").map((a) => a.trim()).filter(Boolean)};
      if (i.username.value) data.email.username = i.username.value;
      if (i.password.value) data.email.password = i.password.value;
      if (i.starttls.checked) data.email.starttls = true;
    }
    if (i.webhook.value.trim()) data.webhook = i.webhook.value.trim();
    if (i.min_interval.value !== "") data.min_interval = Number(i.min_interval.value);
    if (i.oldest_waiting.value !== "") data.oldest_waiting = Number(i.oldest_waiting.value);
    if (!i.dead_letters.checked) data.dead_letters = false;
    const limits = {};
    for (const line of backlog.children) {
      const [q, n] = line.querySelectorAll("input");
      if (q.value.trim() && n.value !== "") limits[q.value.trim()] = Number(n.value);
    }
    if (Object.keys(limits).length) data.backlog = limits;
    return data;
  }

  form.addEventListener("input", () => { dirty = true; message.clear(); });
  i.email.addEventListener("change", () => { emailFields.hidden = !i.email.checked; });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.clear();
    try {
      const answer = await ctx.api("/v1/settings/alerts", {method: "PUT", body: settings()});
      loaded = answer.alerts;
      fill(loaded);
      ctx.toast("Alert settings saved.", "ok");
    } catch (error) {
      message.show(`Not saved: ${error.message}`);
    }
  });
  test.addEventListener("click", async () => {
    if (dirty) {
      message.show("Save your changes first: the test alert goes through the saved settings.");
      return;
    }
    test.disabled = true;
    setText(test, "Sending…");
    results.replaceChildren();
    try {
      const answer = await ctx.api("/v1/settings/alerts/test", {method: "POST"});
      message.show(answer.message, answer.sent ? "ok" : "error");
      results.replaceChildren(...answer.targets.map((t) => h("li", {class: t.delivered ? "ok" : "error"},
        h("strong", {text: t.target}), t.delivered ? ": delivered" : `: not delivered (${t.error})`)));
    } catch (error) {
      message.show(`No test alert: ${error.message}`);
    } finally {
      test.disabled = false;
      setText(test, "Send a test alert");
    }
  });

  async function refresh() {
    const answer = await ctx.api("/v1/settings/alerts");
    if (!ctx.alive()) return;
    const same = JSON.stringify(answer.alerts) === JSON.stringify(loaded);
    if (loaded === undefined || (!same && !dirty)) {
      loaded = answer.alerts;
      fill(loaded);
    } else if (!same) {
      changed.replaceChildren("These settings were changed elsewhere while you edit them. ",
        h("button", {type: "button", class: "small", text: "Show theirs", onclick: () => {
          loaded = answer.alerts;
          fill(loaded);
        }}), " or save yours to replace them.");
      changed.hidden = false;
    }
    head.updated();
  }

  return {refresh};
}
