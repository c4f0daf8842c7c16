// Entry point: htmx for server-rendered live fragments, then small enhancers for what must run in
// the browser (charts, artifact renderers). Everything re-runs on content htmx swaps in.
import htmx from "htmx.org/dist/htmx.esm.js";
import { enhanceArtifacts, registerRenderer } from "./renderers.js";
import { renderCsvTable } from "./csv-table.js";
import { renderJsonTree } from "./json-tree.js";
import { enhanceLibraryUpload } from "./library-upload.js";
import { enhanceMenu } from "./menu.js";
import { enhanceCompare } from "./compare.js";
import "./pointcloud-viewer.js";
import "./product.js";
import "./copy.js";

// Polling fragments are swapped wholesale; keep htmx's history cache out of it so Back shows the
// server's current state instead of a stale snapshot.
htmx.config.historyCacheSize = 0;
htmx.config.defaultSwapStyle = "outerHTML";
// The pages run under a Content-Security-Policy with no inline script, no eval and no inline style
// (webapp/settings.py): htmx must not evaluate attributes (hx-on, js: values, trigger filters) or
// add its indicator <style> (moelab.css carries those rules). allowScriptTags stays on: with it off
// htmx deletes every <script> it swaps in, the charts' JSON specs (type="application/json") too;
// an inline JavaScript <script> would be blocked by the policy anyway, and no template holds one.
htmx.config.allowEval = false;
htmx.config.includeIndicatorStyles = false;
window.htmx = htmx;

registerRenderer("text/csv", renderCsvTable);
registerRenderer("application/json", renderJsonTree);

async function enhanceCharts(root) {
  if (!root.querySelector("[data-chart]")) return;
  // vega-embed is ~1 MB: only pages that draw a chart fetch it.
  const { drawCharts } = await import("./charts.js");
  await drawCharts(root);
}

// Keep live logs scrolled to their newest line.
function followLogs(root) {
  const scope = root.querySelectorAll ? root : document;
  for (const log of scope.querySelectorAll("[data-follow]")) log.scrollTop = log.scrollHeight;
}

// Progress bars: the server writes the percentage as data-progress; the fill's width is set here,
// through the DOM, because the policy forbids style attributes in the markup.
function fillProgress(root) {
  const scope = root.querySelectorAll ? root : document;
  const bars = [...scope.querySelectorAll("[data-progress]")];
  if (root.matches?.("[data-progress]")) bars.push(root);
  for (const bar of bars) {
    const fill = bar.querySelector(".progress-fill");
    const percent = Number.parseFloat(bar.dataset.progress);
    if (fill && Number.isFinite(percent)) fill.style.setProperty("--value", `${Math.min(100, Math.max(0, percent))}%`);
  }
}

function enhance(root) {
  followLogs(root);
  fillProgress(root);
  enhanceArtifacts(root);
  enhanceLibraryUpload(root);
  enhanceMenu();
  enhanceCompare(root);
  enhanceCharts(root).catch((error) => console.error("moelab: chart failed", error));
}

// A polled fragment that comes back as the login page means the session ended: go there
// instead of drawing a login form inside the jobs table.
document.addEventListener("htmx:beforeSwap", (event) => {
  const url = new URL(event.detail.xhr.responseURL || location.href, location.href);
  if (url.pathname === "/login/") {
    event.detail.shouldSwap = false;
    location.assign(url.pathname + url.search);
  }
});

// Polls pause while the tab is hidden: a filter in hx-trigger ("[!document.hidden]") would need eval,
// which the policy forbids, so every request htmx would send from a hidden page is dropped here
// (nobody can click in a hidden tab; visibilitychange brings the page up to date on return).
document.addEventListener("htmx:beforeRequest", (event) => {
  if (document.hidden) event.preventDefault();
});

// What inline handlers used to do, for any element on any page (also ones htmx swaps in later):
// <form data-confirm="Question?"> asks before it submits; <select data-autosubmit> submits its form.
document.addEventListener("submit", (event) => {
  const question = event.target.closest?.("form[data-confirm]")?.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
document.addEventListener("change", (event) => {
  if (event.target.matches?.("[data-autosubmit]")) event.target.form?.requestSubmit();
});

// A later module (e.g. the point-cloud viewer) registers its renderer through this object.
window.moelab = { registerRenderer, enhance };

htmx.onLoad((element) => enhance(element));
