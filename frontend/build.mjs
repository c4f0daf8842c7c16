// Bundle the browser code into webapp/static/build/ (gitignored; `make frontend` runs this).
// One ES-module entry plus lazily loaded chunks: vega-embed (~1 MB) only reaches pages that draw a chart.
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const outdir = path.resolve(here, "../webapp/static/build");
const watch = process.argv.includes("--watch");

const options = {
  entryPoints: {
    main: path.join(here, "src/js/main.js"),
    moelab: path.join(here, "src/css/moelab.css"),
  },
  outdir,
  bundle: true,
  splitting: true,
  format: "esm",
  target: ["es2020"],
  minify: !watch,
  sourcemap: watch,
  chunkNames: "chunks/[name]-[hash]",
  legalComments: "linked",
  logLevel: "info",
};

// The theme script runs before the first paint, so it is a classic script (not a module) of its own.
const themeInit = {
  entryPoints: { "theme-init": path.join(here, "src/js/theme-init.js") },
  outdir,
  bundle: true,
  format: "iife",
  target: ["es2020"],
  minify: !watch,
  logLevel: "info",
};

if (watch) {
  for (const config of [options, themeInit]) await (await esbuild.context(config)).watch();
} else {
  await Promise.all([esbuild.build(options), esbuild.build(themeInit)]);
}
