// The shards of a redis+shards:// store on the stores page: their states, an admin's Add,
// Drain, Undrain and Remove (each change kept in the store, with who made it and when),
// and the log of changes. Hidden for a store that is not sharded.

import {code, h, note, reconcile, row, section, setAttr, setChildren, setText, table} from "../dom.js";
import {local} from "../format.js";
import {messageLine} from "./common.js";

const COLUMNS = [["#", "num"], ["server"], ["role"], ["state"]]; // since when: the state's title
const LOG_COLUMNS = [["when"], ["change"], ["server"], ["who"]];
const LOG_SHOWN = 20;

export function shardsPanel(ctx) {
  const admin = ctx.can("admin");
  const columns = admin ? [...COLUMNS, ["", "row-actions"]] : COLUMNS;
  const message = messageLine();
  const list = table(columns, {id: "shards"});
  const log = table(LOG_COLUMNS, {id: "shard-log"});
  const server = h("input", {type: "text", name: "server", id: "shard-server", placeholder: "host:port/db",
    "aria-label": "server to add", autocomplete: "off", required: true});
  const form = h("form", {class: "inline-form", id: "add-shard"}, server,
    h("button", {type: "submit", class: "primary", text: "Add shard"}));
  const el = h("div", {hidden: true}, section("Shards", admin ? form : null, message.el, list.el,
    note("New jobs go to live shards; a draining one takes none, while its jobs still run and stay readable. ",
      "A shard is removed once drained and empty of unfinished jobs. Unique keys and records stay on the URL's ",
      "servers (anchors), so they never move. Every producer, worker and server follows a change within seconds. ",
      "From a shell: ", code("deferq shard list"), ".")),
  section("Changes", log.el));

  async function change(path, options, done) {
    message.clear();
    try {
      show(await ctx.api(path, options));
      ctx.toast(done, "ok");
      return true;
    } catch (error) {
      message.show(error.message);
      return false;
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = server.value.trim();
    if (await change("/v1/store/shards", {method: "POST", body: {server: name}}, `Shard ${name} added.`)) {
      server.value = "";
    }
  });

  const ACTIONS = {
    live: [["drain", "Drain", "", "takes no new jobs; the jobs it holds still run"]],
    draining: [["undrain", "Undrain", "", "takes new jobs again"],
      ["remove", "Remove", "danger", "leaves the store: refused while it holds unfinished jobs"]],
  };
  function buttons(shard) {
    if (shard.role !== "added") return [];
    return (ACTIONS[shard.state] || []).map(([action, label, cls, what]) => {
      const button = h("button", {type: "button", class: `small ${cls}`, text: label, dataset: {action},
        "aria-label": `${label} shard ${shard.name}`});
      button.addEventListener("click", async () => {
        if (!(await ctx.confirm({title: `${label} shard ${shard.name}?`, action: label, danger: action === "remove",
          body: [`It ${what}.`]}))) return;
        button.disabled = true;
        const path = `/v1/store/shards/${shard.number}${action === "remove" ? "" : `/${action}`}`;
        await change(path, {method: action === "remove" ? "DELETE" : "POST"}, `Shard ${shard.name}: ${action} done.`);
        button.disabled = false;
      });
      return h("span", {class: "row-buttons"}, button);
    });
  }

  function show(data) {
    el.hidden = !data.sharded;
    reconcile(list.body, data.shards, (s) => String(s.number), () => row(columns.length, columns.map((c) => c[1])),
      (tr, shard) => {
        const cells = tr.children;
        setText(cells[0], shard.number);
        setText(cells[1], shard.name);
        setText(cells[2], shard.role);
        setText(cells[3], shard.state);
        setAttr(cells[3], "title", shard.since ? `since ${local(shard.since)}` : null);
        if (admin) setChildren(cells[4], `${shard.role} ${shard.state}`, () => buttons(shard));
        tr.dataset.key = shard.name;
        tr.dataset.state = shard.state;
      });
    const changes = data.log.slice(-LOG_SHOWN).reverse();
    reconcile(log.body, changes, (c) => `${c.at} ${c.action} ${c.shard}`, () => row(LOG_COLUMNS.length),
      (tr, c) => {
        setText(tr.children[0], local(c.at));
        setText(tr.children[1], c.action);
        setText(tr.children[2], c.shard);
        setText(tr.children[3], c.who);
      });
  }

  return {el, refresh: () => ctx.api("/v1/store/shards").then((data) => ctx.alive() && show(data), () => {})};
}
