// /dashboard/jobs?state=&queue=&task=&q=: jobs that match a filter (GET /v1/search).

import {code, h, note} from "../dom.js";
import {pageHead} from "./common.js";
import {searchList} from "./filters.js";

const LIMIT = 100;

export function mount(root, ctx) {
  const head = pageHead("Jobs");
  const list = searchList(ctx, {
    fields: ["state", "queue", "task", "q"],
    emptyFiltered: ["No job matches this filter.", "Clear the filter, or widen it (any state, any queue)."],
    emptyAll: ["No jobs yet.", "Enqueue one with POST /v1/jobs, or task.enqueue() in Python; it shows up here."],
  });
  root.append(head.el, h("section", {class: "panel"}, list.form, list.list),
    note("Filtering by task and searching by id or key look at a window of the newest jobs of each state ",
      "(the stores list jobs by state and queue only). Searching every job through store indexes, and keyset ",
      "pagination over millions of jobs, are later store features. The API: ", code("GET /v1/search"), "."));

  async function refresh() {
    if (await list.refresh(LIMIT)) head.updated();
  }

  return {
    refresh,
    update(next) {
      list.update(next);
      refresh();
    },
  };
}
