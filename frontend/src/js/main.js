// Entry point: htmx for server-rendered live fragments, then small enhancers for what must run in
// the browser (charts, artifact renderers). Everything re-runs on content htmx swaps in.
import htmx from "htmx.org/dist/htmx.esm.js";
import { enhanceArtifacts, registerRenderer } from "./renderers.js";
import { renderCsvTable } from "./csv-table.js";
import { renderJsonTree } from "./json-tree.js";
import { enhanceLibraryUpload } from "./library-upload.js";
import "./pointcloud-viewer.js";
import "./product.js";

// Polling fragments are swapped wholesale; keep htmx's history cache out of it so Back shows the
// server's current state instead of a stale snapshot.
htmx.config.historyCacheSize = 0;
htmx.config.defaultSwapStyle = "outerHTML";
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

function enhance(root) {
  followLogs(root);
  enhanceArtifacts(root);
  enhanceLibraryUpload(root);
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

// A later module (e.g. the point-cloud viewer) registers its renderer through this object.
window.moelab = { registerRenderer, enhance };

htmx.onLoad((element) => enhance(element));
