// Artifact renderers by media type. The server renders images and videos itself; types that need
// code in the browser (CSV tables, JSON trees, and later the point-cloud viewer for
// application/x-ply) register a function here. A renderer gets the empty container and the
// artifact's URL, and fills the container.
const renderers = new Map();

export function registerRenderer(mediaType, render) {
  renderers.set(mediaType, render);
  // Artifacts already on the page wait for their renderer, so registration order does not matter.
  enhanceArtifacts(document);
}

export function rendererFor(mediaType) {
  return renderers.get(mediaType);
}

export function enhanceArtifacts(root) {
  const scope = root.querySelectorAll ? root : document;
  const targets = [...scope.querySelectorAll("[data-render]")];
  if (root.matches?.("[data-render]")) targets.push(root);
  for (const element of targets) {
    const render = renderers.get(element.dataset.render);
    if (!render || element.dataset.rendered) continue;
    element.dataset.rendered = "pending";
    render(element, { url: element.dataset.src, name: element.dataset.name || "" })
      .then(() => {
        element.dataset.rendered = "done";
      })
      .catch((error) => {
        element.dataset.rendered = "failed";
        element.textContent = `Could not display this file: ${error.message}`;
      });
  }
}

export async function fetchText(url, maxBytes = 2_000_000) {
  const response = await fetch(url, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const size = Number(response.headers.get("Content-Length") || 0);
  if (size > maxBytes) throw new Error(`too large to preview (${size} bytes); download it instead`);
  return response.text();
}
