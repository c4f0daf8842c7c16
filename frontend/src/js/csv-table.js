// text/csv artifacts as a table (the first rows; the download link has the whole file).
import { fetchText } from "./renderers.js";

const MAX_ROWS = 200;

// RFC 4180: quoted fields may hold commas, newlines and doubled quotes.
export function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c === '"') {
      quoted = true;
    } else if (c === ",") {
      row.push(field);
      field = "";
    } else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(field);
      rows.push(row);
      row = [];
      field = "";
    } else {
      field += c;
    }
  }
  if (field !== "" || row.length) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

export async function renderCsvTable(container, { url }) {
  const rows = parseCsv(await fetchText(url));
  const table = document.createElement("table");
  table.className = "table";
  const [header = [], ...body] = rows;
  const head = table.createTHead().insertRow();
  for (const name of header) {
    const th = document.createElement("th");
    th.textContent = name;
    head.appendChild(th);
  }
  const tbody = table.createTBody();
  for (const values of body.slice(0, MAX_ROWS)) {
    const tr = tbody.insertRow();
    for (const value of values) {
      const td = tr.insertCell();
      td.textContent = value;
      if (value !== "" && !Number.isNaN(Number(value))) td.className = "num";
    }
  }
  container.replaceChildren(table);
  if (body.length > MAX_ROWS) {
    const note = document.createElement("p");
    note.className = "muted small";
    note.textContent = `First ${MAX_ROWS} of ${body.length} rows.`;
    container.appendChild(note);
  }
}
