// /dashboard/tokens: API tokens: list, make one (shown once), revoke.

import {token as myToken} from "../api.js";
import {code, copyButton, empty, h, note, reconcile, row, section, setChildren, setText, table} from "../dom.js";
import {ago, local} from "../format.js";
import {adminOnly, messageLine, pageHead} from "./common.js";

const COLUMNS = [["id"], ["scope"], ["note", "wide"], ["created", "opt"], ["", "end"]];
const SCOPE_HELP = {
  reader: "reader: sees everything in this console and the read routes of the API; changes nothing",
  producer: "producer: a reader that also enqueues and cancels jobs (for your services)",
  admin: "admin: everything, including topics, dead letters, tokens and alert settings",
};

async function sha256(text) {
  if (!window.crypto || !crypto.subtle) return null; // only in a secure context (https or localhost)
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

export function mount(root, ctx) {
  if (!ctx.can("admin")) return adminOnly(root, ctx, "Tokens", "Listing, making and revoking tokens is for admins.");
  const head = pageHead("API tokens");
  const message = messageLine();
  const scope = h("select", {name: "scope", "aria-label": "scope"},
    Object.keys(SCOPE_HELP).map((s) => h("option", {value: s, text: s})));
  const help = h("p", {class: "muted", text: SCOPE_HELP.reader});
  scope.addEventListener("change", () => setText(help, SCOPE_HELP[scope.value]));
  const noteInput = h("input", {name: "note", type: "text", maxlength: 200, placeholder: "what it is for, e.g. on-call",
    "aria-label": "note"});
  const made = h("div", {id: "new-token", hidden: true});
  const form = h("form", {class: "inline-form", id: "make-token"}, scope, noteInput,
    h("button", {type: "submit", class: "primary", text: "Make a token"}));
  const t = table(COLUMNS, {id: "tokens"});
  const nothing = empty("No tokens are stored.", "Every route is open only with --no-auth; make a token above.");
  root.append(head.el, section("Make a token", form, help, made), message.el, section("Tokens", t.el, nothing),
    note("The store keeps only each token's SHA-256 hash, so a token cannot be shown again. A revoked token stops ",
      "working within 5 s (servers cache lookups). From a shell: ", code("deferq token list"), ", ",
      code("deferq token revoke ID"), "."));
  let mine = null;
  sha256(myToken.get()).then((digest) => { mine = digest && digest.slice(0, 12); });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.clear();
    try {
      const answer = await ctx.api("/v1/tokens", {method: "POST", body: {scope: scope.value, note: noteInput.value}});
      const value = h("code", {class: "secret", text: answer.token});
      made.replaceChildren(h("div", {class: "once"},
        h("strong", {text: `A new ${answer.scope} token. It is shown only now: copy it and keep it safe.`}),
        h("div", {class: "secret-row"}, value, copyButton(() => answer.token)),
        h("button", {type: "button", class: "small", text: "Done, hide it", onclick: () => { made.hidden = true; }})));
      made.hidden = false;
      noteInput.value = "";
      refresh();
    } catch (error) {
      message.show(`Could not make a token: ${error.message}`);
    }
  });

  async function revoke(record) {
    const own = record.id === mine;
    const sure = await ctx.confirm({title: `Revoke token ${record.id}?`, action: "Revoke", danger: true,
      body: [`Clients using this ${record.scope} token (${record.note || "no note"}) will get 401 within 5 s.`,
        own ? "This is the token this browser is using: the console will ask for another." : ""].filter(Boolean)});
    if (!sure) return;
    try {
      await ctx.api(`/v1/tokens/${encodeURIComponent(record.id)}`, {method: "DELETE"});
      ctx.toast(`Token ${record.id} revoked.`, "ok");
    } catch (error) {
      message.show(`Could not revoke ${record.id}: ${error.message}`);
    }
    refresh();
  }

  async function refresh() {
    const data = await ctx.api("/v1/tokens");
    if (!ctx.alive()) return;
    nothing.hidden = data.tokens.length > 0;
    const records = data.tokens.slice().reverse();
    reconcile(t.body, records, (r) => r.id, () => row(COLUMNS.length, COLUMNS.map((c) => c[1])), (tr, r) => {
      const cells = tr.children;
      setChildren(cells[0], `${r.id}:${r.id === mine}`, () => [h("span", {class: "mono", text: r.id}),
        r.id === mine ? h("span", {class: "badge", text: "this browser"}) : null]);
      setChildren(cells[1], r.scope, () => h("span", {class: `badge scope-${r.scope}`, text: r.scope}));
      setText(cells[2], r.note || "");
      setText(cells[3], `${local(r.created_at)} (${ago(r.created_at)})`);
      setChildren(cells[4], "revoke", () => h("button", {type: "button", class: "small danger", text: "Revoke",
        onclick: () => revoke(r)}));
    });
    head.updated();
  }

  return {refresh};
}
