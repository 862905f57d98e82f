// /dashboard/stores: the store this server uses: up or down, how fast it answers, and each
// of its parts (every Redis shard of a sharded URL) with its version and memory or size.

import {lineChart} from "../chart.js";
import {code, h, note, reconcile, row, section, setText, table} from "../dom.js";
import {local} from "../format.js";
import {card, pageHead} from "./common.js";
import {shardsPanel} from "./shards.js";

const KEEP = 300; // latency samples kept by this tab (10 minutes at one per 2 s)
const KEY = "deferq-latency";

export function ms(value) {
  return value < 0.01 ? "<0.01 ms" : `${value < 10 ? value.toFixed(2) : Math.round(value)} ms`;
}

export function bytes(value) {
  if (value === null || value === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let n = value;
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return `${n < 10 && unit ? n.toFixed(1) : Math.round(n)} ${units[unit]}`;
}

export function mount(root, ctx) {
  const head = pageHead("Stores");
  const state = card("state");
  const latency = card("ping (median of 3)");
  const skew = card("clock difference");
  const facts = h("dl", {class: "facts"});
  const kind = h("dd");
  const backend = h("dd");
  const url = h("dd", {class: "mono"});
  const error = h("dd");
  const checked = h("dd");
  facts.append(h("dt", {text: "kind"}), kind, h("dt", {text: "backend"}), backend, h("dt", {text: "URL"}), url,
    h("dt", {text: "last error"}), error, h("dt", {text: "checked"}), checked);
  const chartPanel = section("Ping latency (ms), sampled by this tab");
  const chart = lineChart(chartPanel, {height: 160, least: 1, empty: "Collecting samples…"});
  const columns = [["part"], ["state"], ["ping", "num"], ["version"], ["memory / size", "num"], ["error"]];
  const parts = table(columns, {id: "store-parts"});
  const shards = shardsPanel(ctx);
  root.append(head.el, h("div", {class: "cards"}, state.el, latency.el, skew.el), section("The store", facts),
    section("Parts", parts.el), shards.el, chartPanel,
    note("One store per server: the one its --url names (", code("GET /v1/store"), "). Its parts (",
      code("GET /v1/store/parts"), ") are the servers of a redis+shards:// URL, each up or down on its own: ",
      "while one is down, jobs stored on the others run on. A Redis Cluster is one part (it fails over itself). ",
      "The clock difference is the store's clock (which every due time uses) minus this server's."));

  function showParts(list) {
    reconcile(parts.body, list, (part) => part.name, () => row(columns.length, columns.map((c) => c[1])),
      (tr, part) => {
        const cells = tr.children;
        setText(cells[0], part.name);
        setText(cells[1], part.up ? "up" : "down");
        cells[1].dataset.health = part.up ? "up" : "down";
        setText(cells[2], part.latency_ms === null ? "—" : ms(part.latency_ms));
        setText(cells[3], part.version || "—");
        setText(cells[4], bytes(part.memory_bytes ?? part.size_bytes));
        setText(cells[5], part.error || "");
        tr.dataset.key = part.name;
      });
  }

  async function refresh() {
    ctx.api("/v1/store/parts").then((answer) => ctx.alive() && showParts(answer.parts), () => {});
    shards.refresh();
    const report = await ctx.api("/v1/store");
    if (!ctx.alive()) return;
    setText(state.number, report.up ? "up" : "down");
    state.el.dataset.health = report.up ? "up" : "down";
    setText(latency.number, report.latency_ms === null ? "—" : ms(report.latency_ms));
    setText(latency.small, report.pings_ms.length ? `pings: ${report.pings_ms.map(ms).join(", ")}` : "");
    setText(skew.number, report.clock_skew_ms === null ? "—" : `${report.clock_skew_ms} ms`);
    setText(kind, report.kind);
    setText(backend, report.backend || "—");
    setText(url, report.url);
    setText(error, report.error || "none");
    error.classList.toggle("error-text", Boolean(report.error));
    setText(checked, local(Date.now() / 1000));
    if (report.up) ctx.clearBanner();
    else ctx.storeTrouble({code: "store_unavailable", message: report.error});
    const samples = JSON.parse(sessionStorage.getItem(KEY) || "[]").slice(-(KEEP - 1));
    samples.push([Date.now() / 1000, report.latency_ms]);
    sessionStorage.setItem(KEY, JSON.stringify(samples));
    chart.update(["ping ms"], [samples.map((s) => s[0]), samples.map((s) => s[1])]);
    head.updated();
  }

  return {refresh, unmount: () => chart.destroy()};
}
