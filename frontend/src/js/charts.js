// Vega-Lite charts from the specs a job stored with ctx.chart. Each chart element names a
// <script type="application/json"> holding its spec, so the page never evaluates spec text.
// The pages' Content-Security-Policy forbids eval and inline styles: Vega runs its expressions
// (calculate, filter, tooltip formats, signals) through the CSP-safe interpreter over a parsed AST
// instead of compiling them with new Function, and neither vega-embed nor its tooltip handler
// adds a <style> element (moelab.css carries their rules).
import embed from "vega-embed";
import { expressionInterpreter } from "vega-interpreter";
import { isDark } from "./theme.js";
import { labelChart, titleOf } from "./chart-table.js";

export async function drawCharts(root) {
  const scope = root.querySelectorAll ? root : document;
  const targets = [...scope.querySelectorAll("[data-chart]")];
  if (root.matches?.("[data-chart]")) targets.push(root);
  for (const element of targets) {
    if (element.dataset.drawn) continue;
    const source = document.getElementById(element.dataset.chart);
    if (!source) continue;
    element.dataset.drawn = "pending";
    const spec = JSON.parse(source.textContent);
    // Fill the card's width unless the job fixed one; "container" needs a sized parent (the frame).
    // Composed charts (facets, repeats, concatenations) size their own cells: fitting them to the
    // frame is not supported by Vega-Lite and drew them zero pixels wide.
    const composed = Boolean(spec.facet || spec.repeat || spec.concat || spec.hconcat || spec.vconcat);
    if (spec.width === undefined && !composed) {
      spec.width = "container";
    }
    try {
      const result = await embed(element, spec, {
        renderer: "svg",
        ast: true,
        expr: expressionInterpreter,
        defaultStyle: false,
        tooltip: { disableDefaultStyle: true, theme: isDark() ? "dark" : "light" },
        theme: isDark() ? "dark" : undefined,
        // PNG and JSON downloads come from the server (vl-convert), linked beside each chart.
        actions: false,
        config: {
          background: "transparent",
          autosize: composed ? { type: "pad" } : { type: "fit-x", contains: "padding" },
        },
      });
      // The Vega view, for tests that count the marks it drew (a property, not markup).
      element.vegaView = result.view;
      labelChart(element, titleOf(spec));
      element.dataset.drawn = "done";
    } catch (error) {
      element.dataset.drawn = "failed";
      element.textContent = `This chart could not be drawn: ${error.message}`;
    }
  }
}

// A new colour theme: draw every chart again in its palette.
document.addEventListener("moelab:theme", () => {
  const drawn = [...document.querySelectorAll("[data-chart][data-drawn]")];
  for (const element of drawn) {
    delete element.dataset.drawn;
    element.textContent = "";
  }
  if (drawn.length) drawCharts(document).catch((error) => console.error("moelab: chart failed", error));
});
