// application/json artifacts as a collapsible tree built from <details> elements.
import { fetchText } from "./renderers.js";

function leaf(value) {
  const span = document.createElement("span");
  const type = value === null ? "null" : typeof value;
  span.className = `json-${type}`;
  span.textContent = JSON.stringify(value);
  return span;
}

function node(key, value, depth) {
  const li = document.createElement("li");
  const label = document.createElement("span");
  label.className = "json-key";
  label.textContent = key === null ? "" : `${key}: `;
  if (value === null || typeof value !== "object") {
    li.append(label, leaf(value));
    return li;
  }
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  const details = document.createElement("details");
  details.open = depth < 2;
  const summary = document.createElement("summary");
  const brackets = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
  summary.append(label, document.createTextNode(brackets));
  details.appendChild(summary);
  details.appendChild(tree(entries, depth + 1));
  li.appendChild(details);
  return li;
}

function tree(entries, depth) {
  const ul = document.createElement("ul");
  ul.className = "json-tree";
  for (const [key, value] of entries.slice(0, 500)) ul.appendChild(node(key, value, depth));
  return ul;
}

export async function renderJsonTree(container, { url }) {
  const value = JSON.parse(await fetchText(url));
  container.replaceChildren(tree([[null, value]], 0));
  container.style.padding = "var(--space-2)";
}
