// /dashboard/events: the events kept for durable waits (GET /v1/events, the store's kv
// "deferq.events"), newest first: what was sent, when, how big its data is and how many
// waiting jobs it woke. An event is kept `keep` seconds (a week by default) for jobs
// that start waiting later.

import {code, empty, h, note, reconcile, row, section, setAttr, setText, table} from "../dom.js";
import {ago, count, local} from "../format.js";
import {pageHead} from "./common.js";

const COLUMNS = [["event"], ["key"], ["sent", "num"], ["woke", "num"], ["size", "num opt"], ["data", "wide opt"]];
const PREVIEW = 80; // characters of an event's data shown in its row

function bytes(n) {
  return n < 1024 ? `${n} B` : `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KiB`;
}

export function mount(root, ctx) {
  const head = pageHead("Events");
  const t = table(COLUMNS, {id: "events"});
  const nothing = empty("No event is kept.",
    h("span", {}, "A task waits for one with ", code("job.wait_for(name, event, key, timeout)"), "; send one with ",
      code("app.send_event(event, key, data)"), ", ", code("POST /v1/events"), " or ",
      code("deferq event send EVENT KEY"), "."));
  root.append(head.el, section(null, t.el, nothing),
    note("The last event of each event and key is kept (a week unless its sender said otherwise), so that a ",
      "job that starts waiting later still gets it. “Woke” counts the waiting jobs it woke when it was sent."));

  async function refresh() {
    const data = await ctx.api("/v1/events");
    if (!ctx.alive()) return;
    nothing.hidden = data.events.length > 0;
    t.el.hidden = !data.events.length;
    reconcile(t.body, data.events, (e) => e.id, () => row(COLUMNS.length, COLUMNS.map((c) => c[1])), (tr, e) => {
      const cells = tr.children;
      setText(cells[0], e.event);
      setText(cells[1], e.key);
      setText(cells[2], ago(e.at));
      setAttr(cells[2], "title", local(e.at));
      setText(cells[3], count(e.woke));
      setText(cells[4], bytes(e.size));
      const shown = JSON.stringify(e.data);
      setText(cells[5], shown.length > PREVIEW ? `${shown.slice(0, PREVIEW)}…` : shown);
      cells[5].classList.add("mono");
    });
    head.updated();
  }

  return {refresh};
}
