// Charts of the per-minute history the store keeps (GET /v1/stats/history): the same on
// every server instance, and across restarts. Throughput (enqueued, succeeded, failed,
// dead per point) and latency (wait and run percentiles), over the last hour or day.

import {query} from "./api.js";
import {lineChart, stateColor} from "./chart.js";
import {h, note, section, setText} from "./dom.js";
import {compact, count} from "./format.js";

const RANGE_KEY = "deferq-history-range";
const RANGES = {hour: {minutes: 60, step: 1, title: "last hour", per: "per minute"},
  day: {minutes: 1440, step: 10, title: "last day", per: "per 10 minutes"}};
const FETCH_EVERY = 10_000; // ms: the store's counts move every few seconds, not every poll
const COUNTED = ["enqueued", "succeeded", "failed", "dead"];
const COLORS = {enqueued: "queued", succeeded: "succeeded", failed: "active", dead: "dead"};
const TIMES = ["wait_p50", "wait_p99", "run_p50", "run_p99"];
const TIME_COLORS = ["#4c6ef5", "#7950f2", "#12b886", "#e64980"];

// The panel of a queue (or of everything, with queue null): append `el`, call refresh()
// on each poll, destroy() when the view goes.
export function historyPanel(ctx, queue) {
  const range = h("select", {"aria-label": "how far back the charts go"},
    Object.entries(RANGES).map(([value, r]) => h("option", {value, text: r.title})));
  range.value = RANGES[sessionStorage.getItem(RANGE_KEY)] ? sessionStorage.getItem(RANGE_KEY) : "hour";
  const title = h("h2");
  const totals = h("p", {class: "muted count-line", "data-testid": "history-totals"});
  const el = section(null);
  el.classList.add("history");
  el.append(h("div", {class: "panel-head"}, title, range), totals);
  const throughput = lineChart(el, {colorOf: (label) => stateColor(COLORS[label]),
    empty: "No jobs counted in this window yet: counts appear within seconds of jobs being enqueued and run."});
  el.append(h("h3", {text: "Wait and run time (seconds)"}));
  const latency = lineChart(el, {colorOf: (label, i) => TIME_COLORS[i], least: 0.01,
    empty: "No job ran in this window yet."});
  el.append(note("Kept in the store per minute for 7 days, by queue and task: the same on every server. ",
    "Wait: from a job's due time to its start; failed: attempts that raised (retried or dead)."));
  let fetched = 0;

  range.addEventListener("change", () => {
    sessionStorage.setItem(RANGE_KEY, range.value);
    fetched = 0;
    refresh();
  });

  async function refresh() {
    if (Date.now() - fetched < FETCH_EVERY) return;
    fetched = Date.now();
    const chosen = RANGES[range.value];
    try {
      const data = await ctx.api(`/v1/stats/history${query({queue, minutes: chosen.minutes, step: chosen.step})}`);
      if (ctx.alive() && chosen === RANGES[range.value]) show(data, chosen);
    } catch (error) {
      fetched = 0; // try again at the next poll; the view's banner says what is wrong
      throw error;
    }
  }

  function show(data, chosen) {
    const s = data.series;
    setText(title, `${queue ? `${queue}, ` : "Throughput, "}${chosen.title} (${chosen.per})`);
    const t = data.totals;
    setText(totals, `${count(t.enqueued)} enqueued · ${count(t.succeeded)} succeeded · ${count(t.retried)} retried · ` +
      `${count(t.dead)} dead · ${count(t.cancelled)} cancelled · wait p50 ${time(t.wait_p50)}, ` +
      `p99 ${time(t.wait_p99)} · run p50 ${time(t.run_p50)}, p99 ${time(t.run_p99)}`);
    throughput.update(COUNTED, [s.t, ...COUNTED.map((name) => s[name])]);
    latency.update(TIMES.map((name) => name.replace("_", " ")), [s.t, ...TIMES.map((name) => s[name])]);
  }

  return {el, refresh, destroy() {
    throughput.destroy();
    latency.destroy();
  }};
}

function time(seconds) {
  return seconds === null || seconds === undefined ? "—" : seconds < 1 ? `${Math.round(seconds * 1000)} ms` :
    compact(seconds);
}
