// The console's shell: which view a URL shows (History API: deep links, reload and the
// back button work), the token, the polling loop (every 2 s, paused while the tab is
// hidden), the store-down banner, confirmations and toasts.

import {ApiError, request, token} from "./api.js";
import {h} from "./dom.js";
import * as alerts from "./views/alerts.js";
import * as batch from "./views/batch.js";
import * as dead from "./views/dead.js";
import * as events from "./views/events.js";
import * as flow from "./views/flow.js";
import * as job from "./views/job.js";
import * as jobs from "./views/jobs.js";
import * as limits from "./views/limits.js";
import * as overview from "./views/overview.js";
import * as periodic from "./views/periodic.js";
import * as queue from "./views/queue.js";
import * as stores from "./views/stores.js";
import * as topic from "./views/topic.js";
import * as topics from "./views/topics.js";
import * as tokens from "./views/tokens.js";
import * as workers from "./views/workers.js";

const POLL_MS = 2000;
const SCOPES = ["reader", "producer", "admin"];
const BASE = "/dashboard";

// [path pattern, view, title, nav entry]
const ROUTES = [
  [/^\/dashboard\/?$/, overview, "Overview", "overview"],
  [/^\/dashboard\/queues\/([^/]+)\/?$/, queue, "Queue", null],  // reached from any list: no nav entry of its own
  [/^\/dashboard\/jobs\/?$/, jobs, "Jobs", "jobs"],
  [/^\/dashboard\/jobs\/([^/]+)\/?$/, job, "Job", "jobs"],
  [/^\/dashboard\/jobs\/([^/]+)\/flow\/?$/, flow, "Workflow", "jobs"],
  [/^\/dashboard\/batches\/([^/]+)\/?$/, batch, "Batch", "jobs"],
  [/^\/dashboard\/dead\/?$/, dead, "Dead", "dead"],
  [/^\/dashboard\/workers\/?$/, workers, "Workers", "workers"],
  [/^\/dashboard\/periodic\/?$/, periodic, "Periodic", "periodic"],
  [/^\/dashboard\/events\/?$/, events, "Events", "events"],
  [/^\/dashboard\/limits\/?$/, limits, "Limits", "limits"],
  [/^\/dashboard\/topics\/?$/, topics, "Topics", "topics"],
  [/^\/dashboard\/topics\/([^/]+)\/?$/, topic, "Topic", "topics"],
  [/^\/dashboard\/alerts\/?$/, alerts, "Alerts", "alerts"],
  [/^\/dashboard\/stores\/?$/, stores, "Stores", "stores"],
  [/^\/dashboard\/tokens\/?$/, tokens, "Tokens", "tokens"],
];
// [entry, label, path, the scope that may open it]: a reader sees no admin-only entry.
const NAV = [["overview", "Overview", "/", "reader"], ["jobs", "Jobs", "/jobs", "reader"],
  ["dead", "Dead", "/dead", "reader"], ["workers", "Workers", "/workers", "reader"],
  ["periodic", "Periodic", "/periodic", "reader"], ["events", "Events", "/events", "reader"],
  ["limits", "Limits", "/limits", "reader"],
  ["topics", "Topics", "/topics", "admin"],
  ["alerts", "Alerts", "/alerts", "admin"], ["stores", "Stores", "/stores", "reader"],
  ["tokens", "Tokens", "/tokens", "admin"]];

const main = document.getElementById("main");
const banner = document.getElementById("banner");
const who = document.getElementById("who");
const forget = document.getElementById("forget");
const themeButton = document.getElementById("theme");
const nav = document.getElementById("nav");
const navBox = document.getElementById("nav-box");
const navLeft = document.getElementById("nav-left");
const navRight = document.getElementById("nav-right");

let identity = null; // {auth, scope}
let current = null; // {module, path, view}
let generation = 0;

// -- the banner: the store or the server is down -------------------------------------

function showBanner(text) {
  banner.textContent = text;
  banner.hidden = false;
}

function clearBanner() {
  if (!banner.hidden) {
    banner.hidden = true;
    banner.textContent = "";
  }
}

function storeTrouble(error) {
  if (error.status === 0) {
    showBanner("The deferq server does not answer. The console keeps what it last showed and tries again every 2 s.");
  } else if (error.code === "store_unavailable") {
    showBanner(`The store is down: ${error.message}. The console keeps what it last showed and ` +
      "tries again every 2 s.");
  } else if (error.code === "busy") {
    showBanner("The server is busy (503): trying again in 2 s.");
  }
}

// -- calls, with what every view shares ------------------------------------------------

async function call(path, options) {
  try {
    const data = await request(path, options);
    if (!path.startsWith("/v1/store")) clearBanner();
    return data;
  } catch (error) {
    if (error.status === 401) askForToken(error.message);
    else if (error.status === 503 || error.status === 0) storeTrouble(error);
    throw error;
  }
}

function can(needed) {
  return identity !== null && SCOPES.indexOf(identity.scope) >= SCOPES.indexOf(needed);
}

function toast(text, kind) {
  const box = h("div", {class: `toast ${kind || ""}`, role: "status", text});
  document.getElementById("toasts").append(box);
  setTimeout(() => box.remove(), 5000);
}

// A modal confirmation; `typed`: a word the person must type first (for what cannot be undone).
function confirmAction({title, body, action, danger, typed}) {
  return new Promise((resolve) => {
    const input = typed ? h("input", {type: "text", autocomplete: "off", "aria-label": `type ${typed}`}) : null;
    const ok = h("button", {type: "submit", class: danger ? "danger" : "primary", text: action || "OK"});
    const cancel = h("button", {type: "button", text: "Cancel"});
    const dialog = h("dialog", {class: "confirm"},
      h("form", {method: "dialog"},
        h("h2", {text: title}),
        ...[body].flat().filter(Boolean).map((line) => (line instanceof Node ? line : h("p", {text: line}))),
        typed ? h("label", {}, `Type ${typed} to confirm: `, input) : null,
        h("div", {class: "buttons"}, cancel, ok)));
    if (input) {
      ok.disabled = true;
      input.addEventListener("input", () => { ok.disabled = input.value.trim() !== typed; });
    }
    let answer = false;
    ok.addEventListener("click", () => { answer = true; });
    cancel.addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(answer);
    });
    document.body.append(dialog);
    dialog.showModal();
    (input || ok).focus();
  });
}

function navigate(url, options) {
  const replace = options && options.replace;
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  route();
}

function context(params) {
  const mine = ++generation;
  return {
    params,
    query: new URLSearchParams(location.search),
    scope: identity.scope,
    auth: identity.auth,
    can,
    api: call,
    navigate,
    confirm: confirmAction,
    toast,
    storeTrouble,
    clearBanner,
    alive: () => mine === generation,
  };
}

// -- routing ---------------------------------------------------------------------------

function match(path) {
  for (const [pattern, module, title, entry] of ROUTES) {
    const found = pattern.exec(path);
    if (found) return {module, title, entry, params: found.slice(1).map(decodeURIComponent)};
  }
  return null;
}

function route() {
  if (identity === null) return;
  const path = location.pathname;
  const found = match(path);
  for (const a of nav.querySelectorAll("a")) {
    if (found && a.dataset.entry === found.entry) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  // The same view with other query parameters (a filter): keep the page, just update it.
  if (found && current && current.module === found.module && current.path === path && current.view.update) {
    current.view.update(new URLSearchParams(location.search));
    return;
  }
  if (current && current.view.unmount) current.view.unmount();
  current = null;
  main.replaceChildren();
  window.scrollTo(0, 0);
  if (!found) {
    document.title = "Not found · deferq";
    main.append(h("div", {class: "empty"}, h("strong", {text: "No such page."}),
      h("p", {}, "The console's pages are listed at the top. ", h("a", {href: `${BASE}/`, text: "Go to the overview"}))));
    return;
  }
  document.title = `${found.title} · deferq`;
  const view = found.module.mount(main, context(found.params));
  current = {module: found.module, path, view};
  refresh();
}

async function refresh() {
  if (!current || !current.view.refresh) return;
  try {
    await current.view.refresh();
  } catch (error) {
    if (!(error instanceof ApiError)) console.error(error);
  }
}

async function poll() {
  await refresh();
  setTimeout(poll, POLL_MS);
}

document.addEventListener("click", (event) => {
  const a = event.target.closest("a[href]");
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey ||
      event.shiftKey || event.altKey || a.target) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith(BASE)) return;
  event.preventDefault();
  if (url.pathname + url.search !== location.pathname + location.search) navigate(url.pathname + url.search);
});
window.addEventListener("popstate", route);
document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });

// -- the token -----------------------------------------------------------------------------

function askForToken(reason) {
  identity = null;
  if (current && current.view.unmount) current.view.unmount();
  current = null;
  who.hidden = true;
  forget.hidden = !token.get();
  const input = h("input", {id: "token", type: "password", autocomplete: "off", spellcheck: "false",
    placeholder: "dq_…", required: true});
  const form = h("form", {id: "login", class: "panel login"},
    h("h1", {text: "Sign in with an API token"}),
    h("p", {class: "muted", text: reason || "This server wants an API token."}),
    h("label", {for: "token", text: "API token"}), input,
    h("button", {type: "submit", class: "primary", text: "Use this token"}),
    h("p", {class: "note"}, "A reader token can look at everything here; an admin token can also act. ",
      "Make the first admin token on the server: ", h("code", {text: "deferq token create --scope admin"}),
      "; then make reader tokens on the Tokens page. The token stays in this browser's local storage."));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    token.set(input.value);
    start();
  });
  main.replaceChildren(form);
  document.title = "Sign in · deferq";
  input.focus();
}

async function start() {
  try {
    identity = await request("/v1/whoami");
  } catch (error) {
    if (error.status === 401 || error.status === 403) {
      askForToken(token.get() ? `That token was refused: ${error.message}` : null);
    } else {
      storeTrouble(error);
      main.replaceChildren(h("div", {class: "empty"}, h("strong", {text: "The console cannot start."}),
        h("p", {text: `${error.message}. It tries again in a few seconds.`})));
      setTimeout(start, 3000);
    }
    return;
  }
  clearBanner();
  who.hidden = false;
  who.textContent = identity.auth ? identity.scope : "no auth";
  who.className = `badge scope-${identity.auth ? identity.scope : "open"}`;
  who.title = identity.auth ? `This token has the ${identity.scope} scope` : "deferq serve --no-auth: every route is open";
  forget.hidden = !identity.auth;
  showNav();
  route();
}

// The entries this token may open; on a narrow screen, a fade and an arrow at an edge say
// that more entries are out of sight (the bar scrolls sideways).
function showNav() {
  nav.replaceChildren(...NAV.filter(([, , , scope]) => can(scope)).map(([entry, label, path]) =>
    h("a", {href: BASE + path, dataset: {entry}, text: label})));
  edges();
}

function edges() {
  const more = nav.scrollWidth - nav.clientWidth;
  navBox.classList.toggle("more-left", more > 1 && nav.scrollLeft > 1);
  navBox.classList.toggle("more-right", more > 1 && nav.scrollLeft < more - 1);
}

nav.addEventListener("scroll", edges, {passive: true});
window.addEventListener("resize", edges);
for (const [button, step] of [[navLeft, -1], [navRight, 1]]) {
  button.addEventListener("click", () => nav.scrollBy({left: step * nav.clientWidth * 0.7, behavior: "smooth"}));
}

forget.addEventListener("click", () => {
  token.clear();
  askForToken("The token was removed from this browser.");
});

// -- theme -----------------------------------------------------------------------------------

function showTheme() {
  const choice = window.deferqTheme.choice();
  themeButton.textContent = {auto: "Theme: auto", light: "Theme: light", dark: "Theme: dark"}[choice];
}

themeButton.addEventListener("click", () => {
  const order = ["auto", "light", "dark"];
  window.deferqTheme.choose(order[(order.indexOf(window.deferqTheme.choice()) + 1) % order.length]);
  showTheme();
});

showTheme();
start();
setTimeout(poll, POLL_MS);
