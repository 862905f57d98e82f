// /dashboard/jobs/{id}/flow: the whole workflow a job belongs to (GET /v1/jobs/{id}/flow):
// a chain, a chord, a group, a batch and its callbacks, as columns in the order the jobs
// run (a job stands one column right of the last job it runs after), each node with its
// state, a link to its job, live. A column of more than GROUPED jobs shows them by state
// with counts, each group opened on a click, so a fan-out of thousands stays readable.

import {badge, empty, h, link, setChildren, setText} from "../dom.js";
import {count, shortId} from "../format.js";
import {pageHead} from "./common.js";

const GROUPED = 12; // nodes a column lists one by one; past it, by state
const STATE_ORDER = ["active", "queued", "scheduled", "blocked", "succeeded", "dead", "cancelled", "purged"];

// Each node's column: 0 for a job that runs after none of the graph's jobs, else one past
// the highest column of those it runs after (the edges form no cycle: a job runs after
// jobs enqueued before it).
export function columnsOf(nodes, edges) {
  const parents = new Map(nodes.map((n) => [n.id, []]));
  for (const [a, b] of edges) if (parents.has(b) && parents.has(a)) parents.get(b).push(a);
  const column = new Map();
  const depth = (id, seen) => {
    if (column.has(id)) return column.get(id);
    if (seen.has(id)) return 0; // a cycle cannot come from deferq; never loop on one
    seen.add(id);
    const above = parents.get(id).map((p) => depth(p, seen));
    const d = above.length ? Math.max(...above) + 1 : 0;
    column.set(id, d);
    return d;
  };
  const columns = [];
  for (const node of nodes) {
    const d = depth(node.id, new Set());
    (columns[d] ||= []).push(node);
  }
  return columns.filter(Boolean);
}

function nodeItem(node, self) {
  const state = node.state || "purged";
  return h("li", {class: `node state-${state}${self ? " self" : ""}`, dataset: {key: node.id}},
    badge(state), link(`/dashboard/jobs/${encodeURIComponent(node.id)}/flow`, node.task || "(purged)",
      {title: `job ${node.id}: see the workflow from it`}),
    link(`/dashboard/jobs/${encodeURIComponent(node.id)}`, shortId(node.id), {class: "muted mono", title: node.id}));
}

// A large column: one line per state with its count; opening it lists that state's jobs.
function grouped(nodes, open) {
  const byState = new Map();
  for (const node of nodes) {
    const state = node.state || "purged";
    (byState.get(state) || byState.set(state, []).get(state)).push(node);
  }
  const states = [...byState.keys()].sort((a, b) => STATE_ORDER.indexOf(a) - STATE_ORDER.indexOf(b));
  return states.map((state) => {
    const members = byState.get(state);
    const details = h("details", {class: `group state-${state}`, dataset: {state}},
      h("summary", {}, badge(state), h("strong", {text: count(members.length)})),
      h("ul", {class: "links nodes"}, members.map((n) => nodeItem(n, false))));
    details.open = open.has(state);
    details.addEventListener("toggle", () => (details.open ? open.add(state) : open.delete(state)));
    return details;
  });
}

export function mount(root, ctx) {
  const id = ctx.params[0];
  const head = pageHead("Workflow");
  head.heading.append(" of ", link(`/dashboard/jobs/${encodeURIComponent(id)}`, shortId(id), {class: "mono"}));
  const summary = h("p", {class: "muted count-line", id: "flow-summary"});
  const graph = h("div", {class: "flow-graph whole", id: "flow"});
  const gone = h("div", {hidden: true});
  root.append(head.el, gone, h("section", {class: "panel"}, summary, graph));
  const opened = new Map(); // column -> the states opened there, kept across refreshes

  async function refresh() {
    let data;
    try {
      data = await ctx.api(`/v1/jobs/${encodeURIComponent(id)}/flow`);
    } catch (error) {
      if (error.status === 404 && ctx.alive()) {
        graph.hidden = true;
        gone.hidden = false;
        setChildren(gone, "404", () => empty(`No job ${id}.`, "It may have been purged.",
          link("/dashboard/jobs", "Find jobs")));
      }
      throw error;
    }
    if (!ctx.alive()) return;
    graph.hidden = false;
    gone.hidden = true;
    const columns = columnsOf(data.nodes, data.edges);
    const states = {};
    for (const node of data.nodes) states[node.state || "purged"] = (states[node.state || "purged"] || 0) + 1;
    setText(summary, `${count(data.nodes.length)} job(s) in ${columns.length} step(s): ` +
      Object.entries(states).map(([s, n]) => `${count(n)} ${s}`).join(", ") +
      (data.truncated ? ` (the first ${count(data.nodes.length)}: the workflow has more)` : ""));
    const key = JSON.stringify([data.nodes.map((n) => [n.id, n.state]), [...opened].map(([c, s]) => [c, [...s]])]);
    setChildren(graph, key, () => columns.flatMap((nodes, i) => {
      if (!opened.has(i)) opened.set(i, new Set());
      const title = h("h3", {text: i === 0 ? "First" : `Then (${i})`});
      const body = nodes.length > GROUPED ? grouped(nodes, opened.get(i)) :
        [h("ul", {class: "links nodes"}, nodes.map((n) => nodeItem(n, n.id === id)))];
      const column = h("div", {class: "flow-col", dataset: {column: i}}, title, ...body);
      return i ? [h("span", {class: "flow-arrow", "aria-hidden": "true"}), column] : [column];
    }));
    head.updated();
  }

  return {refresh};
}
