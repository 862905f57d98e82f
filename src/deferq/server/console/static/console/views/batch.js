// /dashboard/batches/{id}: a batch as a whole (GET /v1/batches/{id}?members=): how far it
// got (a bar of its members by state), its callbacks, and its members, each a link.

import {badge, empty, h, link, reconcile, section, setBadge, setChildren, setText} from "../dom.js";
import {count, shortId} from "../format.js";
import {pageHead} from "./common.js";

const SHOWN = 200; // members listed
const PARTS = ["succeeded", "dead", "cancelled", "pending"];

export function mount(root, ctx) {
  const id = ctx.params[0];
  const head = pageHead("Batch");
  head.heading.append(" ", h("span", {class: "mono", text: id}));
  const state = badge("…");
  head.heading.after(state);
  const bar = h("div", {class: "stack", id: "batch-bar", role: "img"});
  const numbers = h("p", {class: "batch-counts", id: "batch-counts"});
  const callbacks = h("ul", {class: "links", id: "batch-callbacks"});
  const members = h("ul", {class: "links members", id: "batch-members"});
  const more = h("p", {class: "muted count-line"});
  const gone = h("div", {hidden: true});
  const body = h("div", {},
    section("Progress", bar, numbers),
    section("Callbacks", callbacks),
    section("Members", more, members));
  root.append(head.el, gone, body);

  async function refresh() {
    let data;
    try {
      data = await ctx.api(`/v1/batches/${encodeURIComponent(id)}?members=${SHOWN}`);
    } catch (error) {
      if (error.status === 404 && ctx.alive()) {
        body.hidden = true;
        gone.hidden = false;
        setChildren(gone, "404", () => empty(`No batch ${id}.`, "A batch is listed once its with block has " +
          "ended (then all its members are known).", link("/dashboard/jobs", "Find jobs")));
      }
      throw error;
    }
    if (!ctx.alive()) return;
    body.hidden = false;
    gone.hidden = true;
    setBadge(state, data.state);
    const done = data.total - data.pending;
    setChildren(bar, PARTS.map((p) => data[p]).join(), () => PARTS.filter((p) => data[p]).map((p) =>
      h("span", {class: `part state-${p}`, dataset: {part: p}, title: `${data[p]} ${p}`})));
    for (const part of bar.children) part.style.flexGrow = String(data[part.dataset.part]); // CSSOM: CSP allows it
    bar.setAttribute("aria-label", `${done} of ${data.total} finished`);
    setChildren(numbers, JSON.stringify(data), () => [
      h("span", {}, h("strong", {text: `${count(done)} of ${count(data.total)}`}), " finished"),
      ...PARTS.map((p) => h("span", {class: `state-${p}`}, h("strong", {text: count(data[p])}), ` ${p}`))]);
    const named = Object.entries(data.callbacks || {});
    setChildren(callbacks, JSON.stringify(named), () => named.length ? named.map(([name, job]) => h("li", {},
      h("span", {class: "muted", text: `${name}:`}), link(`/dashboard/jobs/${encodeURIComponent(job)}`, shortId(job),
        {class: "mono"}))) : h("li", {class: "muted", text: "none"}));
    reconcile(members, data.members, (m) => m.id, (m) => h("li", {}, badge(m.state || "purged"),
      h("a", {href: `/dashboard/jobs/${encodeURIComponent(m.id)}`}), h("span", {class: "muted mono"})), (li, m) => {
      setBadge(li.children[0], m.state || "purged");
      setText(li.children[1], m.task || "(purged)");
      setText(li.children[2], shortId(m.id));
    });
    setText(more, data.total > data.members.length ? `The first ${data.members.length} of ${count(data.total)}.` :
      `${count(data.total)} member(s), in the order they were added.`);
    head.updated();
  }

  return {refresh};
}
