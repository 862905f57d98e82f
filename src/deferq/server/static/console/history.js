// Per-queue counts over the last hour, sampled by this browser tab from its polling of
// GET /v1/queues and kept in sessionStorage (so a reload or another view keeps them).
// The store keeps no history yet: a per-minute history in the store is a later feature.

import {STATES} from "./format.js";

const KEY = "deferq-history";
const KEEP = 3600; // seconds
const EVERY = 5; // one sample per this many seconds; the newest one follows each poll

let samples = load();

function load() {
  try {
    const stored = JSON.parse(sessionStorage.getItem(KEY) || "[]");
    return Array.isArray(stored) ? stored : [];
  } catch {
    return [];
  }
}

export function record(queues) {
  const t = Date.now() / 1000;
  const sample = {t, q: {}};
  for (const [name, counts] of Object.entries(queues)) sample.q[name] = STATES.map((s) => counts[s] || 0);
  const last = samples[samples.length - 1];
  const previous = samples[samples.length - 2];
  if (last && previous && last.t - previous.t < EVERY) samples[samples.length - 1] = sample;
  else samples.push(sample);
  samples = samples.filter((s) => s.t >= t - KEEP);
  try {
    sessionStorage.setItem(KEY, JSON.stringify(samples));
  } catch {
    // storage full or off: the chart still works for this page
  }
}

export function span() {
  return samples.length > 1 ? samples[samples.length - 1].t - samples[0].t : 0;
}

// One line per queue of one state's count: {labels, data: [xs, ...ys]}.
export function byQueue(state) {
  const index = STATES.indexOf(state);
  const names = [...new Set(samples.flatMap((s) => Object.keys(s.q)))].sort();
  const xs = samples.map((s) => s.t);
  const ys = names.map((name) => samples.map((s) => (s.q[name] ? s.q[name][index] : null)));
  return {labels: names, data: [xs, ...ys]};
}

// One line per state of one queue.
export function byState(queue, states) {
  const xs = samples.map((s) => s.t);
  const ys = states.map((state) => samples.map((s) => (s.q[queue] ? s.q[queue][STATES.indexOf(state)] : null)));
  return {labels: states, data: [xs, ...ys]};
}
