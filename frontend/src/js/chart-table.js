// A text alternative for every chart: a "Data table" toggle under each Vega-Lite chart that shows
// the chart's own data as a table (screen readers, keyboard users, and anyone who wants numbers).
// Built from the spec the page already holds, so it works even when a chart cannot be drawn.
const MAX_ROWS = 500;

/** The first inline data found in a (possibly layered or concatenated) Vega-Lite spec. */
function inlineRows(spec) {
  if (!spec || typeof spec !== "object") return null;
  if (Array.isArray(spec.data?.values)) return spec.data.values;
  if (spec.datasets) {
    const first = Object.values(spec.datasets).find(Array.isArray);
    if (first) return first;
  }
  for (const key of ["layer", "concat", "hconcat", "vconcat"]) {
    for (const child of spec[key] || []) {
      const rows = inlineRows(child);
      if (rows) return rows;
    }
  }
  return inlineRows(spec.spec);
}

export function titleOf(spec) {
  const title = spec?.title;
  if (typeof title === "string") return title;
  if (title?.text) return Array.isArray(title.text) ? title.text.join(" ") : title.text;
  return "";
}

function cell(value) {
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toPrecision(4);
  if (value === null || value === undefined) return "";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

function buildTable(rows, caption) {
  const columns = [...new Set(rows.slice(0, 50).flatMap((row) => Object.keys(row)))];
  const table = document.createElement("table");
  table.className = "table";
  const cap = table.createCaption();
  cap.className = "small muted";
  cap.textContent = rows.length > MAX_ROWS ? `${caption}: first ${MAX_ROWS} of ${rows.length} rows` : caption;
  const head = table.createTHead().insertRow();
  for (const column of columns) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = column;
    head.appendChild(th);
  }
  const body = table.createTBody();
  for (const row of rows.slice(0, MAX_ROWS)) {
    const tr = body.insertRow();
    for (const column of columns) {
      const td = tr.insertCell();
      td.textContent = cell(row[column]);
      if (typeof row[column] === "number") td.className = "num";
    }
  }
  return table;
}

let counter = 0;

/** Name a chart after its title (vega-embed names every chart "Vega visualization"). */
export function labelChart(frame, title) {
  if (title) frame.setAttribute("aria-label", `Chart: ${title}. The data table below holds the same numbers.`);
}

export function enhanceChartTables(root) {
  const scope = root?.querySelectorAll ? root : document;
  for (const frame of scope.querySelectorAll("[data-chart]")) {
    if (frame.dataset.tableReady) continue;
    const source = document.getElementById(frame.dataset.chart);
    if (!source) continue;
    frame.dataset.tableReady = "true";
    let spec;
    try {
      spec = JSON.parse(source.textContent);
    } catch {
      continue;
    }
    const title = titleOf(spec);
    labelChart(frame, title);
    const rows = inlineRows(spec);
    if (!rows || !rows.length) continue;
    const panel = document.createElement("div");
    panel.className = "chart-table";
    panel.id = `chart-table-${++counter}`;
    panel.hidden = true;
    panel.tabIndex = 0;
    panel.setAttribute("role", "region");
    panel.setAttribute("aria-label", `Data of ${title || "the chart"}`);
    panel.appendChild(buildTable(rows, title || "Chart data"));
    const button = document.createElement("button");
    button.type = "button";
    button.className = "link-button small";
    button.dataset.chartTableToggle = "";
    button.setAttribute("aria-expanded", "false");
    button.setAttribute("aria-controls", panel.id);
    button.textContent = "Data table";
    button.addEventListener("click", () => {
      const open = panel.hidden;
      panel.hidden = !open;
      button.setAttribute("aria-expanded", String(open));
      button.textContent = open ? "Hide data table" : "Data table";
    });
    const figure = frame.closest("figure") || frame.parentElement;
    const caption = figure.querySelector("figcaption");
    if (caption) caption.prepend(button);
    else figure.appendChild(button);
    figure.appendChild(panel);
  }
}

// htmx fires htmx:load for the first page and for every fragment it swaps in.
document.addEventListener("htmx:load", (event) => enhanceChartTables(event.target));
