// Building and updating the page. Every string from the server is set as text
// (textContent, attribute values): nothing here parses HTML, and the page's
// Content-Security-Policy (require-trusted-types-for 'script') makes sure nothing does.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = String(value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Change text only when it differs, so a selection or a hover survives a refresh.
export function setText(el, text) {
  const value = text === null || text === undefined ? "" : String(text);
  if (el.textContent !== value) el.textContent = value;
}

export function setAttr(el, name, value) {
  if (value === null || value === undefined || value === false) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
  } else if (el.getAttribute(name) !== String(value)) {
    el.setAttribute(name, String(value));
  }
}

// Replace an element's children only when what they show changed (compared by `key`).
export function setChildren(el, key, build) {
  if (el.dataset.shown === key) return;
  el.dataset.shown = key;
  el.replaceChildren(...[build()].flat().filter(Boolean));
}

// Bring `parent`'s children in line with `items`, one child per item, matched by key:
// existing nodes are kept (and updated), new ones made, gone ones removed, order fixed.
export function reconcile(parent, items, keyOf, create, update) {
  const existing = new Map();
  for (const child of Array.from(parent.children)) existing.set(child.dataset.key, child);
  let cursor = parent.firstElementChild;
  for (const item of items) {
    const key = String(keyOf(item));
    let node = existing.get(key);
    if (node) existing.delete(key);
    else {
      node = create(item);
      node.dataset.key = key;
    }
    update(node, item);
    if (node === cursor) cursor = cursor.nextElementSibling;
    else parent.insertBefore(node, cursor);
  }
  for (const node of existing.values()) node.remove();
}

export function link(href, text, attrs) {
  return h("a", {href, ...(attrs || {})}, text);
}

export function badge(state) {
  return h("span", {class: `badge state-${state}`, text: state});
}

export function setBadge(el, state) {
  setText(el, state);
  setAttr(el, "class", `badge state-${state}`);
}

// An empty state: what is (not) here and what to do about it.
export function empty(title, ...lines) {
  return h("div", {class: "empty"}, h("strong", {text: title}), lines.map((line) => h("p", {}, line)));
}

export function note(...parts) {
  return h("p", {class: "note"}, ...parts);
}

export function code(text) {
  return h("code", {text});
}

export function section(title, ...children) {
  return h("section", {class: "panel"}, title ? h("h2", {text: title}) : null, ...children);
}

// A table whose body rows are kept by reconcile(); `columns` are [label, class].
export function table(columns, attrs) {
  const body = h("tbody");
  const el = h("div", {class: "table-wrap"},
    h("table", attrs || {},
      h("thead", {}, h("tr", {}, columns.map(([label, cls]) => h("th", {class: cls || null, text: label})))),
      body));
  return {el, body};
}

// One <td> per column; update(row, item) fills them with setText / setChildren.
export function row(count, classes) {
  return h("tr", {}, Array.from({length: count}, (_, i) => h("td", {class: (classes && classes[i]) || null})));
}

export function copyButton(getText, label) {
  const button = h("button", {type: "button", class: "small", text: label || "Copy"});
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(getText());
      button.textContent = "Copied";
    } catch {
      button.textContent = "Select and copy";
    }
    setTimeout(() => { button.textContent = label || "Copy"; }, 1500);
  });
  return button;
}

// Pretty JSON in a <pre>, rewritten only when it changed.
export function setJSON(pre, value) {
  if (value === undefined) return setText(pre, "");
  const flat = JSON.stringify(value);
  setText(pre, flat.length <= 80 ? flat : JSON.stringify(value, null, 2));
}

export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
