// Pieces several views share: page heads, state count cards, messages, filter forms.

import {query} from "../api.js";
import {empty, h, setAttr, setText} from "../dom.js";
import {LIST_STATES, STATES, count, time} from "../format.js";

export function pageHead(title, ...tools) {
  const stamp = h("span", {class: "muted stamp"});
  const heading = h("h1", {text: title});
  const el = h("div", {class: "page-head"}, heading, stamp, h("div", {class: "page-tools"}, ...tools));
  return {
    el,
    heading,
    updated: () => setText(stamp, `updated ${time(Date.now() / 1000)}`),
  };
}

// How many jobs retry (of a queue, or of all): GET /v1/jobs?state=retrying, up to
// RETRYING_SHOWN ("100+" past that); no store keeps this count apart from scheduled.
const RETRYING_SHOWN = 100;
export async function retryingCount(ctx, queue) {
  const data = await ctx.api(`/v1/jobs${query({state: "retrying", queue, limit: RETRYING_SHOWN})}`);
  return data.cursor ? `${RETRYING_SHOWN}+` : data.jobs.length;
}

// A card per state, each a link (hrefOf(state)) showing a count.
export function stateCards(hrefOf, states) {
  const numbers = {};
  const el = h("div", {class: "cards states"}, (states || STATES).map((state) => {
    numbers[state] = h("span", {class: "number", text: "–"});
    return h("a", {class: `card state-card state-${state}`, href: hrefOf(state), dataset: {state}},
      h("span", {class: "label", text: state}), numbers[state]);
  }));
  return {
    el,
    update(counts) {
      for (const state of Object.keys(numbers)) {
        setText(numbers[state], typeof counts[state] === "string" ? counts[state] :
          counts[state] === null ? "–" : count(counts[state]));
        setAttr(numbers[state].parentElement, "data-zero", !counts[state] ? "" : null);
      }
    },
  };
}

export function card(label, value, sub) {
  const number = h("span", {class: "number", text: value || "–"});
  const small = h("span", {class: "sub muted", text: sub || ""});
  const el = h("div", {class: "card"}, h("span", {class: "label", text: label}), number, small);
  return {el, number, small};
}

// A form field: its label, the control, and a hint under it.
export function labelled(label, control, hint) {
  return h("label", {class: "field"}, h("span", {class: "field-label", text: label}), control,
    hint ? h("span", {class: "hint", text: hint}) : null);
}

// A line for what went wrong with the last action or load (the banner is for the store).
export function messageLine() {
  const el = h("p", {class: "message", role: "status", hidden: true});
  return {
    el,
    show(content, kind) {
      el.className = `message ${kind || "error"}`;
      if (content instanceof Node) el.replaceChildren(content);
      else setText(el, content);
      el.hidden = false;
    },
    clear() {
      el.hidden = true;
      setText(el, "");
    },
  };
}

export function adminOnly(root, ctx, title, why) {
  root.append(h("div", {class: "page-head"}, h("h1", {text: title})),
    empty(`${title} need an admin token.`, why,
      `This browser's token has the ${ctx.scope} scope. Sign in with an admin token to see and change them.`));
  return {};
}

// A select of queues that keeps its choice when the list of queues changes.
export function queueSelect(name, value, anyLabel) {
  const select = h("select", {name, "aria-label": "queue"}, h("option", {value: "", text: anyLabel || "any queue"}));
  if (value) select.append(h("option", {value, text: value}));
  select.value = value || "";
  return {
    el: select,
    update(queues) {
      const have = new Set(Array.from(select.options).map((o) => o.value));
      for (const queue of queues) {
        if (!have.has(queue)) select.append(h("option", {value: queue, text: queue}));
      }
    },
  };
}

export function stateSelect(name, value, anyLabel) {
  const select = h("select", {name, "aria-label": "state"}, h("option", {value: "", text: anyLabel || "any state"}),
    LIST_STATES.map((state) => h("option", {value: state, text: state})));
  select.value = value || "";
  return select;
}

export function jobLink(job) {
  return `/dashboard/jobs/${encodeURIComponent(job.id)}`;
}

// What a job runs: its task, or "→ topic" for a callback delivery.
export function jobName(job) {
  return job.topic !== null && job.topic !== undefined ? `→ ${job.topic}` : job.task;
}
