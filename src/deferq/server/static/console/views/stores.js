// /dashboard/stores: the store this server uses: up or down, how fast it answers.

import {lineChart} from "../chart.js";
import {code, h, note, section, setText} from "../dom.js";
import {local} from "../format.js";
import {card, pageHead} from "./common.js";

const KEEP = 300; // latency samples kept by this tab (10 minutes at one per 2 s)
const KEY = "deferq-latency";

export function ms(value) {
  return value < 0.01 ? "<0.01 ms" : `${value < 10 ? value.toFixed(2) : Math.round(value)} ms`;
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
  root.append(head.el, h("div", {class: "cards"}, state.el, latency.el, skew.el), section("The store", facts),
    chartPanel,
    note("One store per server: the one its --url names (", code("GET /v1/store"), "). A Redis shard set or ",
      "cluster is one URL here: the health of each shard, and several stores per server, are later features. ",
      "The clock difference is the store's clock (which every due time uses) minus this server's."));

  async function refresh() {
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
