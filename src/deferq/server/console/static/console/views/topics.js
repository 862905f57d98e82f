// /dashboard/topics: every topic (where callbacks go), with a link to edit each.

import {code, empty, h, link, note, reconcile, row, section, setChildren, setText, table} from "../dom.js";
import {ago, duration} from "../format.js";
import {adminOnly, pageHead} from "./common.js";

const COLUMNS = [["topic"], ["callback URL", "wide"], ["queue", "opt"], ["attempts", "num"], ["ttr", "num opt"],
  ["backoff", "opt"], ["retry condition", "opt"], ["changed", "opt"]];

export function backoffText(backoff) {
  if (!backoff) return "";
  const b = backoff;
  switch (b.kind) {
    case "fixed": return `fixed ${duration(b.seconds ?? 10)}`;
    case "linear": return `linear ${b.first ?? 1} + ${b.step ?? 2}n × ${duration(b.unit ?? 60)}`;
    case "exponential": return `exponential ×${b.base ?? 2} from ${duration(b.first ?? 1)}`;
    case "schedule": return `schedule ${(b.seconds || []).map(duration).join(", ")}`;
    default: return b.kind;
  }
}

export function mount(root, ctx) {
  if (!ctx.can("admin")) {
    return adminOnly(root, ctx, "Topics", "A topic holds the secret its callbacks are signed with.");
  }
  const head = pageHead("Topics", h("a", {href: "/dashboard/topics/new", class: "button-like primary",
    id: "new-topic", text: "New topic"}));
  const t = table(COLUMNS, {id: "topics"});
  const nothing = empty("No topics yet.", "A topic names a callback URL: jobs sent to it are POSTed there when due, " +
    "signed, and retried by its rules. Make one with New topic.");
  root.append(head.el, section(null, t.el, nothing),
    note("Workers that deliver callbacks read a topic when each job runs (cached 2 s), so a change applies to ",
      "jobs already waiting. Deliveries need a worker on the topic's queue: ",
      code("deferq worker --app deferq.server.tasks:app"), "."));

  async function refresh() {
    const data = await ctx.api("/v1/topics");
    if (!ctx.alive()) return;
    nothing.hidden = data.topics.length > 0;
    t.el.hidden = !data.topics.length;
    reconcile(t.body, data.topics, (topic) => topic.name, () => row(COLUMNS.length, COLUMNS.map((c) => c[1])),
      (tr, topic) => {
        const cells = tr.children;
        setChildren(cells[0], topic.name, () => link(`/dashboard/topics/${encodeURIComponent(topic.name)}`, topic.name));
        setText(cells[1], `${topic.method} ${topic.url}`);
        setText(cells[2], topic.queue);
        setText(cells[3], topic.max_attempts);
        setText(cells[4], duration(topic.ttr));
        setText(cells[5], backoffText(topic.backoff));
        setText(cells[6], topic.retry_condition || "—");
        setText(cells[7], topic.updated_at ? ago(topic.updated_at) : "");
      });
    head.updated();
  }

  return {refresh};
}
