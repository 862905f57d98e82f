// Line charts drawn by uPlot (shipped in /dashboard/static/vendor/, no CDN), in the
// theme's colours, sized to their container.

import {h} from "./dom.js";

const PALETTE = ["#4c6ef5", "#f76707", "#12b886", "#e64980", "#7950f2", "#fab005", "#15aabf", "#82c91e",
  "#be4bdb", "#fd7e14"];

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// colorOf(label, i): a series' colour; the default walks the palette.
export function lineChart(container, options) {
  const {height = 200, colorOf = (label, i) => PALETTE[i % PALETTE.length], empty = "No samples yet.",
    least = 4} = options || {};
  const box = h("div", {class: "chart"});
  const hint = h("p", {class: "chart-hint muted", text: empty});
  container.append(box, hint);
  let plot = null;
  let shownLabels = "";
  let last = null;

  function build(labels, data) {
    if (plot) plot.destroy();
    plot = null;
    if (!window.uPlot) return;
    const axis = {stroke: css("--muted"), grid: {stroke: css("--grid"), width: 1}, ticks: {stroke: css("--grid")}};
    plot = new window.uPlot({
      width: Math.max(box.clientWidth, 200), height,
      // From zero, and at least `least` high: a flat line of small values stays at the bottom.
      scales: {x: {time: true}, y: {range: (self, low, high) => [0, Math.max(high * 1.1, least)]}},
      series: [{}, ...labels.map((label, i) => ({
        // a series with one value so far (a fresh install's first minute) has no line to draw: a dot
        label, stroke: colorOf(label, i), width: 2, points: {show: lonely(data[i + 1]), size: 7}, spanGaps: true,
      }))],
      axes: [{...axis, space: 70}, {...axis, size: 48}],  // x: time labels apart on a phone
      legend: {live: true},
      cursor: {drag: {x: false, y: false}},
    }, data, box);
    shownLabels = shape(labels, data);
  }

  // What a plot is built for: the labels, and which series are drawn as dots.
  function shape(labels, data) {
    return JSON.stringify([labels, data.slice(1).map(lonely)]);
  }

  function update(labels, data) {
    last = [labels, data];
    const enough = data[0].length > 1;
    hint.hidden = enough;
    box.hidden = !enough;
    if (!enough) return;
    if (!plot || shape(labels, data) !== shownLabels) build(labels, data);
    else plot.setData(data);
  }

  const resize = new ResizeObserver(() => {
    if (plot && box.clientWidth) plot.setSize({width: box.clientWidth, height});
  });
  resize.observe(box);
  const retheme = () => { if (last) { build(...last); } };
  document.addEventListener("themechange", retheme);

  return {
    update,
    destroy() {
      resize.disconnect();
      document.removeEventListener("themechange", retheme);
      if (plot) plot.destroy();
    },
  };
}

export function stateColor(state) {
  return css(`--state-${state}`) || PALETTE[0];
}

// True for a series holding exactly one value (the rest null).
function lonely(values) {
  let found = 0;
  for (const value of values || []) if (value !== null && value !== undefined && ++found > 1) return false;
  return found === 1;
}
