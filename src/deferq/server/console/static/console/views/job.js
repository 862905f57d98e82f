// /dashboard/jobs/{id}: everything about one job, and what may be done with it.

import {badge, copyButton, empty, h, link, reconcile, row, section, setAttr, setBadge, setChildren, setJSON, setText,
  table} from "../dom.js";
import {ago, count, duration, local, shortId} from "../format.js";
import {actionsFor, act} from "./actions.js";
import {jobName, labelled, messageLine} from "./common.js";
import {progressBar, shownState} from "./jobtable.js";

function field(label) {
  const value = h("dd");
  return {el: [h("dt", {text: label}), value], value};
}

// A time as two lines: local, then relative.
function setTime(dd, seconds) {
  setChildren(dd, `${seconds}`, () => seconds ?
    [h("span", {text: local(seconds)}), h("span", {class: "muted rel", dataset: {at: seconds}})] : "—");
  const rel = dd.querySelector(".rel");
  if (rel) setText(rel, ago(seconds));
}

export function mount(root, ctx) {
  const id = ctx.params[0];
  const message = messageLine();
  const title = h("h1", {class: "job-title"}, h("span", {text: "Job "}), h("span", {class: "mono", text: id}));
  const state = badge("…");
  const name = h("span", {class: "job-name"});
  const stopping = h("span", {class: "flag", id: "cancel-requested", hidden: true,
    text: "stop requested", title: "Asked to stop: it ends cancelled at its worker's next heartbeat"});
  const buttons = h("span", {class: "job-actions"});
  const head = h("div", {class: "page-head"}, title, state, stopping, name,
    h("div", {class: "page-tools"}, copyButton(() => id, "Copy id"), buttons));
  const progress = progressBar("job-progress", null, false, true);
  const progressPanel = section("Progress", progress.el);
  progressPanel.hidden = true;

  const f = {
    queue: field("queue"), priority: field("priority"), attempts: field("attempts"), ttr: field("time limit"),
    key: field("key"), fairKey: field("fair key"), tags: field("tags"), created: field("created"), due: field("due"), finished: field("finished"),
    updated: field("last change"), worker: field("lease holder"), lease: field("lease until"),
    lastWorker: field("last run by"),
  };
  const details = h("dl", {class: "facts"}, f.queue.el, f.priority.el, f.attempts.el, f.ttr.el, f.key.el, f.fairKey.el,
    f.tags.el, f.lastWorker.el);
  const times = h("dl", {class: "facts"}, f.created.el, f.due.el, f.finished.el, f.updated.el);
  const remark = remarkPanel(ctx, id, message, () => refresh());
  const lease = h("dl", {class: "facts"}, f.worker.el, f.lease.el);
  const leasePanel = section("Lease", lease);
  leasePanel.hidden = true;
  const argsTitle = h("h2", {text: "Arguments"});
  const args = h("pre", {class: "json", id: "job-args"});
  const kwargs = h("pre", {class: "json", id: "job-kwargs"});
  const kwargsLabel = h("h3", {text: "kwargs"});
  const argsLabel = h("h3", {text: "args"});
  const errorPanel = section("Error");
  const error = h("pre", {class: "traceback", id: "job-error"});
  errorPanel.append(error);
  const resultPanel = section("Result");
  const result = h("pre", {class: "json", id: "job-result"});
  resultPanel.append(result);
  const gone = h("div", {hidden: true});
  const flow = workflowPanel(id);
  const chunk = chunkPanel(ctx, id);
  const steps = stepsPanel(ctx, id, message, () => refresh());
  const tries = attemptsPanel();
  const event = eventPanel(ctx, message, () => refresh());
  const body = h("div", {class: "job-grid"},
    h("div", {class: "job-main"}, progressPanel, event.el, h("section", {class: "panel"}, argsTitle, argsLabel, args, kwargsLabel, kwargs),
      steps.el, flow.el, chunk.el, errorPanel, tries.el, resultPanel),
    h("div", {class: "job-side"}, remark.el, section("Details", details), section("Times", times), leasePanel));
  root.append(head, message.el, gone, body);
  let job = null;

  // The buttons its state and this token allow, made again only when those change.
  function showActions(data) {
    const offered = actionsFor(ctx, data.state).filter(([name]) => !(name === "cancel" && data.cancel_requested));
    setChildren(buttons, offered.map(([name]) => name).join(), () => offered.map(([name, label, cls]) => {
      const button = h("button", {type: "button", class: cls, text: label, dataset: {action: name}});
      button.addEventListener("click", async () => {
        button.disabled = true;
        message.clear();
        try {
          if (await act(ctx, name, job) && name === "delete") ctx.navigate("/dashboard/jobs");
        } catch (error_) {
          message.show(`Could not ${label.toLowerCase()} the job: ${error_.message}`);
        }
        button.disabled = false;
        if (ctx.alive()) refresh();
      });
      return button;
    }));
  }

  async function refresh() {
    let data;
    try {
      data = await ctx.api(`/v1/jobs/${encodeURIComponent(id)}`);
    } catch (error_) {
      if (error_.status === 404 && ctx.alive()) {
        body.hidden = true;
        gone.hidden = false;
        setChildren(gone, "404", () => empty(`No job ${id}.`,
          "It may never have existed, or it was purged: succeeded and cancelled jobs are kept for the result " +
          "retention period, dead ones until purged.", link("/dashboard/jobs", "Find jobs")));
      }
      throw error_;
    }
    if (!ctx.alive()) return;
    job = data;
    body.hidden = false;
    gone.hidden = true;
    show(data);
    await chunk.refresh(data);
    if (!ctx.alive()) return;
    if (data.state === "active") {
      const held = await ctx.api(`/v1/jobs/${encodeURIComponent(id)}/lease`);
      if (!ctx.alive()) return;
      setChildren(f.worker.value, held.worker || "—", () => held.worker ?
        h("a", {href: "/dashboard/workers", text: held.worker}) : "—");
      setText(f.lease.value, held.lease_until ?
        `${local(held.lease_until)} (in ${duration(held.lease_until - held.now)}, renewed while it runs)` : "—");
    }
    leasePanel.hidden = data.state !== "active";
  }

  function show(data) {
    // A scheduled job in a durable wait shows as "waiting" (GET /v1/jobs/{id}: waiting_for).
    setBadge(state, data.waiting_for ? "waiting" : data.state);
    const wait = data.waiting_for;
    setAttr(state, "title", wait ? `scheduled, waiting for ${wait.event} ${wait.key} until ${local(wait.until)}` : null);
    setText(name, jobName(data));
    const topic = data.topic !== null && data.topic !== undefined;
    setText(argsTitle, topic ? "Body (sent to the topic's URL)" : "Arguments");
    argsLabel.hidden = kwargsLabel.hidden = kwargs.hidden = topic;
    const sealed = data.encrypted && data.encrypted.args !== undefined;  // this server has not the key
    if (sealed) setText(args, `encrypted (${data.encrypted.args} bytes)`);
    else setJSON(args, topic ? data.body : data.args);
    kwargsLabel.hidden = kwargs.hidden = topic || sealed;
    setJSON(kwargs, data.kwargs);
    setChildren(f.queue.value, data.queue, () => link(`/dashboard/queues/${encodeURIComponent(data.queue)}`, data.queue));
    setText(f.priority.value, data.priority);
    setText(f.attempts.value, `${data.attempts} of ${data.max_attempts}`);
    setText(f.ttr.value, data.ttr ? duration(data.ttr) : "none");
    setText(f.key.value, data.key || "—");
    setText(f.fairKey.value, data.fair_key || "—");
    const tags = data.tags || [];  // each a link to the jobs with that tag
    setChildren(f.tags.value, tags.join(","), () => tags.length ? tags.flatMap((tag, i) =>
      [i ? ", " : "", link(`/dashboard/jobs?tag=${encodeURIComponent(tag)}`, tag)]) : "—");
    setTime(f.created.value, data.created_at);
    setTime(f.due.value, data.run_at);
    setTime(f.finished.value, data.finished_at);
    setTime(f.updated.value, data.updated_at);
    setText(f.lastWorker.value, data.last_worker || "—");
    remark.show(data.remark);
    flow.show(data);
    steps.show(data.steps || [], data.state);
    tries.show(data.attempt_log || []);
    event.show(data.waiting_for);
    errorPanel.hidden = !data.error;
    setText(error, data.error || "");
    resultPanel.hidden = data.result === null || data.result === undefined;
    setJSON(result, data.result);
    stopping.hidden = !(data.state === "active" && data.cancel_requested);
    progress.show(data);
    progressPanel.hidden = progress.el.hidden;
    showActions(data);
  }

  return {refresh};
}

// Where the job stands in a workflow (GET /v1/jobs/{id}: parents, children, batch), drawn
// as a small graph: the jobs it runs after → this job → those that run after it, each node
// with its state and a link; its batch's counts and a link to the batch. Hidden for a job
// on its own.
function workflowPanel(id) {
  const parents = h("ul", {class: "links nodes", id: "job-parents"});
  const children = h("ul", {class: "links nodes", id: "job-children"});
  const parentsTitle = h("h3", {text: "Runs after"});
  const childrenTitle = h("h3", {text: "Then"});
  const self = h("li", {class: "node self"}, badge("…"), h("strong"), h("span", {class: "muted mono"}));
  const before = h("div", {class: "flow-col"}, parentsTitle, parents);
  const after = h("div", {class: "flow-col"}, childrenTitle, children);
  const toSelf = h("span", {class: "flow-arrow", "aria-hidden": "true"});
  const fromSelf = h("span", {class: "flow-arrow", "aria-hidden": "true"});
  const graph = h("div", {class: "flow-graph", id: "job-graph"}, before, toSelf,
    h("div", {class: "flow-col"}, h("h3", {text: "This job"}), h("ul", {class: "links nodes"}, self)), fromSelf, after);
  const batch = h("div", {class: "batch", id: "job-batch"});
  const whole = h("p", {class: "whole-flow"},
    link(`/dashboard/jobs/${encodeURIComponent(id)}/flow`, "See the whole workflow →", {id: "whole-flow"}));
  const el = section("Workflow", graph, batch, whole);
  el.hidden = true;

  function list(ul, title, links, total, what) {
    ul.hidden = title.hidden = !links.length;
    reconcile(ul, links, (l) => l.id, (l) => h("li", {class: "node"}, badge(l.state || "purged"),
      h("a", {href: `/dashboard/jobs/${encodeURIComponent(l.id)}`}), h("span", {class: "muted mono"})),
    (li, l) => {
      li.className = `node state-${l.state || "purged"}`;
      setBadge(li.children[0], l.state || "purged");
      setText(li.children[1], l.task || "(purged)");
      setText(li.children[2], shortId(l.id));
    });
    setText(title, total > links.length ? `${what} (the first ${links.length} of ${count(total)})` : what);
  }

  function showBatch(b) {
    batch.hidden = !b;
    if (!b) return;
    const role = {member: "a member", on_complete: "its on_complete callback", on_success: "its on_success callback"};
    const counts = b.total === null ? [h("p", {class: "muted", text: "Its with block is still open: members " +
      "are still being added."})] : [h("p", {class: "batch-counts"},
      ["total", "succeeded", "dead", "cancelled", "pending"].map((name) =>
        h("span", {class: name === "total" ? null : `state-${name}`}, h("strong", {text: count(b[name])}), ` ${name}`)))];
    const callbacks = Object.entries(b.callbacks || {}).map(([name, id]) => h("li", {},
      h("span", {class: "muted", text: `${name}: `}), link(`/dashboard/jobs/${encodeURIComponent(id)}`, shortId(id))));
    setChildren(batch, JSON.stringify(b), () => [
      h("h3", {}, "Batch ", link(`/dashboard/batches/${encodeURIComponent(b.id)}`, shortId(b.id),
        {class: "mono", id: "batch-link"}), " ", badge(b.state)),
      h("p", {class: "muted", text: `This job is ${role[b.role]}.`}),
      ...counts, callbacks.length ? h("ul", {class: "links"}, callbacks) : null]);
  }

  return {
    el,
    show(data) {
      const p = data.parents || [];
      const c = data.children || [];
      el.hidden = !p.length && !c.length && !data.batch;
      graph.hidden = !p.length && !c.length;
      before.hidden = toSelf.hidden = !p.length;
      after.hidden = fromSelf.hidden = !c.length;
      self.className = `node self state-${data.state}`;
      setBadge(self.children[0], data.state);
      setText(self.children[1], jobName(data));
      setText(self.children[2], shortId(data.id));
      list(parents, parentsTitle, p, (data.after || []).length, "Runs after");
      list(children, childrenTitle, c, c.length, "Then");
      showBatch(data.batch);
    },
  };
}

// The other jobs of the chunk call that last ran this job (a chunk task's: GET /v1/jobs/{id}
// chunk_call, then GET /v1/jobs?chunk=): "Chunk call: N jobs", the first ones as linked
// nodes with their state and item, and a link to all of them in the jobs list. Hidden for
// a job no call ran (a plain task's, or one still to run).
const CHUNK_READ = 200;  // jobs read to count and show; more are said as "200+"
const CHUNK_SHOWN = 12;  // nodes drawn; the jobs list has them all

function chunkPanel(ctx, id) {
  const title = h("h2", {id: "job-chunk-title", text: "Chunk call"});
  const what = h("p", {class: "muted", id: "job-chunk-note"});
  const nodes = h("ul", {class: "links nodes chunk-jobs", id: "job-chunk"});
  const all = h("p", {class: "whole-flow"}, h("a", {id: "job-chunk-all"}));
  const el = h("section", {class: "panel", id: "job-chunk-panel"}, title, what, nodes, all);
  el.hidden = true;

  return {
    el,
    async refresh(data) {
      const call = data.chunk_call;
      el.hidden = !call;
      if (!call) return;
      const found = await ctx.api(`/v1/jobs?chunk=${encodeURIComponent(call)}&limit=${CHUNK_READ}`);
      if (!ctx.alive()) return;
      // oldest first (the order they were enqueued in, the call's as a rule) when all were read
      const jobs = found.cursor ? found.jobs : found.jobs.slice().reverse();
      const size = found.cursor ? `${count(CHUNK_READ)}+` : count(jobs.length);
      setText(title, `Chunk call: ${size} ${jobs.length === 1 && !found.cursor ? "job" : "jobs"}`);
      setText(what, `One call of ${data.task || "its task"} ran these jobs together (call ${shortId(call)}); ` +
        "a job retried in a later call is listed with that call.");
      const shown = jobs.slice(0, CHUNK_SHOWN);
      reconcile(nodes, shown, (j) => j.id, () => h("li", {class: "node"}, badge("…"), h("a"),
        h("span", {class: "muted mono"})), (li, j) => {
        li.className = `node state-${shownState(j)}${j.id === id ? " self" : ""}`;
        setBadge(li.children[0], shownState(j));  // "retrying", as the job list says
        const a = li.children[1];
        setAttr(a, "href", `/dashboard/jobs/${encodeURIComponent(j.id)}`);
        setText(a, j.id === id ? `${shortId(j.id)} (this job)` : shortId(j.id));
        setText(li.children[2], j.args ? JSON.stringify(j.args.length === 1 ? j.args[0] : j.args).slice(0, 60) : "");
      });
      const link_ = all.firstChild;
      setAttr(link_, "href", `/dashboard/jobs?chunk=${encodeURIComponent(call)}`);
      setText(link_, jobs.length > shown.length || found.cursor ? `All ${size} jobs of this call in the jobs list →` :
        "These jobs in the jobs list →");
    },
  };
}

// The job's durable steps, sleeps and waits (GET /v1/jobs/{id}: steps) as a timeline, in
// the order it reached them: name, kind, state, when it started, and how long it took and
// what it gave, or until when it sleeps or what event it waits for.
const STEP_COLOURS = {"done": "succeeded", "sleeping": "scheduled", "waiting": "scheduled", "timed out": "cancelled",
  "retrying": "retrying", "failed": "dead"};

function stepsPanel(ctx, id, message, after) {
  const list = h("ol", {class: "links steps", id: "job-steps"});
  const el = section("Steps", list);
  el.hidden = true;

  function what(step) {
    if (step.state === "retrying") return `try ${step.failures} failed: ${step.error}`;
    if (step.kind === "children") {  // a gather: its child jobs are linked under Workflow
      return `${count(step.ended)} of ${count(step.total)} child jobs ended` + (step.failed ? `, ${count(step.failed)} failed` : "");
    }
    const tries = step.failures ? ` (after ${step.failures} failed ${step.failures === 1 ? "try" : "tries"})` : "";
    // a step's undo handler, once the job ended dead or cancelled: done, failed (why) or not run
    const undone = step.undone ? ` · undo ${step.undone.state}${step.undone.error ? `: ${step.undone.error}` : ""}` : "";
    if (step.kind === "step") return `${duration(step.took || 0)} → ${JSON.stringify(step.result)}${tries}${undone}`;
    const awaited = step.kind === "wait" ? `${step.event} ${step.key}` : "";
    if (step.state === "sleeping" || step.state === "waiting") return `${awaited} until ${local(step.until)}`;
    return step.kind === "wait" ? `${awaited} → ${JSON.stringify(step.result)}` : `until ${local(step.until)}`;
  }

  // A finished job runs again from a step: the checkpoints from it on are dropped (POST
  // /v1/jobs/{id}/retry-from), after the person confirms.
  function retryFrom(step) {
    const button = h("button", {type: "button", class: "small", text: "Retry from here",
      dataset: {action: "retry-from", step: step.name}});
    button.addEventListener("click", async () => {
      button.disabled = true;
      message.clear();
      try {
        if (await ctx.confirm({title: `Retry from ${step.name}?`, action: "Retry from here",
          body: [`Job ${id} runs again: ${step.name} and every step after it run anew; the steps before it ` +
            "keep their results."]})) {
          await ctx.api(`/v1/jobs/${encodeURIComponent(id)}/retry-from`, {method: "POST", body: {step: step.name}});
          ctx.toast(`Job ${id} is queued again from ${step.name}.`, "ok");
        }
      } catch (error_) {
        message.show(`Could not retry the job from ${step.name}: ${error_.message}`);
      }
      button.disabled = false;
      if (ctx.alive()) after();
    });
    return button;
  }

  return {
    el,
    show(items, state) {
      el.hidden = !items.length;
      const retryable = ["dead", "cancelled", "succeeded"].includes(state) && ctx.can("admin");
      setChildren(list, JSON.stringify([items, retryable]), () => items.map((step) => h("li", {},
        h("span", {class: `badge state-${STEP_COLOURS[step.state]}`, text: step.state}), h("strong", {text: step.name}), h("span", {class: "muted", text: step.kind}),
        h("span", {class: "muted", text: local(step.at)}), h("span", {class: "mono", text: what(step).slice(0, 200)}),
        ...(retryable ? [retryFrom(step)] : []))));
    },
  };
}

// Each attempt of a job that failed at least once (GET /v1/jobs/{id}: attempt_log): when it
// started, the worker, how long it ran, how it ended (a chunk task's: in which call, a link
// to its jobs), and its error (the first line; the
// whole on a click). The Error panel above keeps the last error in full.
function attemptsPanel() {
  const columns = [["#", "num"], ["started", "nowrap"], ["worker", "opt"], ["ran", "num"], ["outcome"], ["error", "wide"]];
  const t = table(columns, {id: "job-attempts"});
  const el = section("Attempts", t.el);
  el.hidden = true;
  return {
    el,
    show(items) {
      el.hidden = !items.length;
      reconcile(t.body, items, (a) => `${a.attempt}`, () => row(columns.length, columns.map((c) => c[1])),
        (tr, a) => {
          const cells = tr.children;
          setText(cells[0], `${a.attempt}`);
          setText(cells[1], local(a.started_at));
          setText(cells[2], a.worker || "—");
          setText(cells[3], a.seconds === null ? "—" : duration(a.seconds));
          setChildren(cells[4], `${a.outcome} ${a.chunk_call}`, () => [badge({retry: "retrying"}[a.outcome] || a.outcome),
            ...(a.chunk_call ? [" ", link(`/dashboard/jobs?chunk=${encodeURIComponent(a.chunk_call)}`,
              `in call ${shortId(a.chunk_call)}`, {class: "chunk-call"})] : [])]);
          setChildren(cells[5], a.error || "", () => a.error ? errorText(a.error) : "—");
        });
    },
  };
}

// An error's first line; a click shows the whole text in place.
function errorText(text) {
  const lines = text.trim().split("\n");
  const first = lines[lines.length - 1];  // a traceback's last line says what was raised
  const shown = h("code", {class: "error-line", text: first});
  if (lines.length < 2) return shown;
  const whole = h("pre", {class: "traceback", text, hidden: true});
  const open = h("button", {type: "button", class: "link-button", "aria-expanded": "false", text: "traceback"});
  open.addEventListener("click", () => {
    whole.hidden = !whole.hidden;
    open.setAttribute("aria-expanded", String(!whole.hidden));
  });
  return [shown, " ", open, whole];
}

// A job in a durable wait: what it waits for, and (producer scope) a form that sends that
// event with the data the waiting job will get (POST /v1/events).
function eventPanel(ctx, message, refresh) {
  const what = h("p", {class: "muted"});
  const data = h("textarea", {rows: 3, "aria-label": "event data (JSON)", placeholder: '{"status": "paid"}'});
  const send = h("button", {type: "button", class: "small primary", id: "send-event", text: "Send the event"});
  const form = h("div", {class: "remark-form"}, labelled("data (JSON)", data), h("div", {class: "actions"}, send));
  const el = section("Waiting for an event", what, ctx.can("producer") ? form : null);
  el.id = "job-waiting";
  el.hidden = true;
  let waiting = null;
  send.addEventListener("click", async () => {
    message.clear();
    let value = null;
    try {
      value = data.value.trim() ? JSON.parse(data.value) : null;
    } catch (error) {
      message.show(`The data is not JSON: ${error.message}`);
      return;
    }
    send.disabled = true;
    try {
      const sent = await ctx.api("/v1/events", {method: "POST",
        body: {event: waiting.event, key: waiting.key, data: value}});
      ctx.toast(`Event sent: ${count(sent.woken)} waiting job(s) woken.`, "ok");
      data.value = "";
    } catch (error) {
      message.show(`Could not send the event: ${error.message}`);
    }
    send.disabled = false;
    refresh();
  });
  return {
    el,
    show(wait) {
      waiting = wait;
      el.hidden = !wait;
      if (!wait) return;
      setText(what, `It waits for the event ${wait.event} with the key ${wait.key}` +
        (wait.step ? ` (step ${wait.step})` : "") + `, until ${local(wait.until)}.`);
    },
  };
}

// The job's free-text remark: shown to all, edited by admins (PUT /v1/jobs/{id}/remark).
// A refresh never overwrites what is being typed.
function remarkPanel(ctx, id, message, refresh) {
  const text = h("p", {class: "remark", id: "job-remark", hidden: ctx.can("admin")}); // admins see the box
  const box = h("textarea", {name: "remark", rows: 3, maxlength: 1000, "aria-label": "remark",
    placeholder: "A note for people: why it was retried, who asked, a ticket number…"});
  const save = h("button", {type: "button", class: "small primary", id: "save-remark", text: "Save remark"});
  const form = h("div", {class: "remark-form"}, box, h("div", {class: "actions"}, save));
  const el = section("Remark", text, ctx.can("admin") ? form : null);
  let shown = null;
  box.addEventListener("input", () => { box.dataset.dirty = "1"; });
  save.addEventListener("click", async () => {
    save.disabled = true;
    message.clear();
    try {
      await ctx.api(`/v1/jobs/${encodeURIComponent(id)}/remark`,
        {method: "PUT", body: {remark: box.value.trim() || null}});
      delete box.dataset.dirty;
      ctx.toast("Remark saved.", "ok");
    } catch (error) {
      message.show(`Could not save the remark: ${error.message}`);
    }
    save.disabled = false;
    refresh();
  });
  return {
    el,
    show(remark) {
      setText(text, remark || "No remark.");
      text.classList.toggle("muted", !remark);
      if (remark !== shown && !box.dataset.dirty && document.activeElement !== box) box.value = remark || "";
      shown = remark;
    },
  };
}
